/* A small program for trace tests: loops, calls, returns, calls through
 * function pointers and a switch compiled to a jump table (indirect jump). */
#include <stdio.h>
#include <stdlib.h>

typedef long (*op_fn)(long, long);

static long add(long a, long b) { return a + b; }
static long sub(long a, long b) { return a - b; }
static long mul(long a, long b) { return a * b; }
static long mix(long a, long b) { return (a ^ b) + (a >> 3); }

static op_fn ops[] = { add, sub, mul, mix };

__attribute__((noinline)) long step(long x, int k)
{
	switch (k & 7) {
	case 0: return x + 1;
	case 1: return x * 3;
	case 2: return x - 7;
	case 3: return x ^ 0x55;
	case 4: return x << 1;
	case 5: return x >> 1;
	case 6: return ~x;
	default: return x + k;
	}
}

__attribute__((noinline)) long fold(long *v, int n)
{
	long acc = 0;
	for (int i = 0; i < n; i++) {
		if (v[i] & 1)
			acc = ops[i & 3](acc, v[i]);
		else
			acc = step(acc, i);
	}
	return acc;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	long *v = malloc(sizeof(long) * (n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
		v[i] = step(i, i * 7);
	printf("%ld\n", fold(v, n));
	free(v);
	return 0;
}
