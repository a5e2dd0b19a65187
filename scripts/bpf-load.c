/* Load (and later unload) a 2-instruction BPF socket filter with the raw
 * bpf(2) syscall, so a concurrent `perf record` sees PERF_RECORD_KSYMBOL
 * (type 1, BPF) and PERF_RECORD_BPF_EVENT records. Needs root (or
 * CAP_BPF + CAP_PERFMON). Usage: bpf-load [HOLD_MS]  (default 50). */
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long hold_ms = argc > 1 ? atol(argv[1]) : 50;
	struct bpf_insn insns[2] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
	attr.insns = (unsigned long)insns;
	attr.insn_cnt = 2;
	attr.license = (unsigned long)"GPL";
	strncpy(attr.prog_name, "poketrace_test", sizeof(attr.prog_name) - 1);

	int fd = syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
	if (fd < 0) {
		perror("bpf(BPF_PROG_LOAD)");
		return 1;
	}
	struct timespec ts = { hold_ms / 1000, (hold_ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
	close(fd); /* the unload (KSYMBOL unregister, BPF_EVENT 2) is deferred by the kernel */
	return 0;
}
