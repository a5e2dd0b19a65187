#!/bin/sh
# What the guest does while `poketrace record` records: each step makes the
# kernel rewrite its code in a different way. Output goes to the recording's
# summary directory as workload.txt.
T=/sys/kernel/tracing
[ -d $T/events ] || T=/sys/kernel/debug/tracing
log() { echo "workload: $*" >>/out/workload.txt; }

# jump labels: the sched_schedstats static key (NOP5 <-> JMP at every site)
echo 1 >/proc/sys/kernel/sched_schedstats
echo 0 >/proc/sys/kernel/sched_schedstats
log "schedstats toggled"

# a tracepoint: its static key and static call (trampoline JMP retargets)
echo 1 >$T/events/sched/sched_switch/enable
sleep 0.1
echo 0 >$T/events/sched/sched_switch/enable
log "sched_switch tracepoint enabled and disabled"

# a kprobe past the fentry NOP: INT3, then (optimised after a delay) JMP32
# through a kprobe_optinsn_page
for f in vfs_read ksys_read do_sys_openat2; do
	if echo "p:poketrace_kp $f+5" >>$T/kprobe_events 2>/dev/null; then
		echo 1 >$T/events/kprobes/poketrace_kp/enable
		cat /proc/version >/dev/null
		sleep 0.3
		echo 0 >$T/events/kprobes/poketrace_kp/enable
		echo "-:poketrace_kp" >>$T/kprobe_events
		log "kprobe at $f+5 armed and removed"
		break
	fi
done

# the function tracer on two functions: CALL <-> NOP5 at their fentry sites
# and an ftrace_trampoline
echo "vfs_read vfs_write" >$T/set_ftrace_filter
echo function >$T/current_tracer
sleep 0.1
echo nop >$T/current_tracer
echo >$T/set_ftrace_filter
log "function tracer on vfs_read, vfs_write and off"

# a BPF program, loaded for 200 ms (KSYMBOL, BPF_EVENT, JIT image); with
# bpf_jit_enable=2 the kernel also prints the JIT code to its log, which
# the host compares with the image the recorder saved
echo 2 >/proc/sys/net/core/bpf_jit_enable
/bin/bpf-load 200 && log "BPF program loaded and unloaded"
echo 1 >/proc/sys/net/core/bpf_jit_enable
# the unload records follow close() asynchronously
sleep 0.2
