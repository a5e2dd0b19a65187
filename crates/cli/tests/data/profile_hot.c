#include <stdio.h>
#include <stdlib.h>

typedef long (*op_fn)(long, long);

__attribute__((noinline)) static long add(long a, long b) { return a + b; }
__attribute__((noinline)) static long mul(long a, long b) { return (a * b) % 1000003; }
__attribute__((noinline)) static long mix(long a, long b) { return (a ^ (b << 3)) + (a >> 2); }

static op_fn ops[3] = { add, mul, mix };

__attribute__((noinline)) static long hot_loop(long n, long seed) {
	long acc = seed;
	for (long i = 0; i < n; i++) {
		if ((i & 7) == 0)
			acc = ops[i % 3](acc, i);
		else if (acc & 1)
			acc += i;
		else
			acc -= i / 3;
	}
	return acc;
}

__attribute__((noinline)) static long cold_path(long x) {
	long r = 0;
	for (int i = 0; i < 3; i++)
		r += ops[(x + i) % 3](x, i);
	return r;
}

int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 100000;
	long r = hot_loop(n, 7);
	if (r % 17 == 0)
		r += cold_path(r);
	printf("%ld\n", r);
	return 0;
}
