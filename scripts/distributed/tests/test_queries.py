"""queries.sql over the cluster's dataset answers what `poketrace decode`, `pokes` and `check`
say, each count recomputed here from their output."""

import bisect
import json
from collections import Counter, defaultdict

import pytest

from datasets import run
from decoded import function, lines
from pokedist import queries


def stat(poketrace, trace):
    return json.loads(run(poketrace, "decode", trace, "--stat", "--json", ok=(0, 1)))


def check(poketrace, trace):
    """`check`'s score of the timeline image."""
    modes = [json.loads(line) for line in run(poketrace, "check", trace, "--json").splitlines()]
    return next(m for m in modes if m["mode"] == "timeline")


def test_branches_per_function(exported, poketrace, trace):
    out, _ = exported
    columns, rows = queries.run(out, "branches_per_function")
    assert columns == ["cpu", "function", "branches"]
    want = Counter((line["cpu"], function(line["sym"])) for line in lines(poketrace, trace, "b"))
    assert {(cpu, f): n for cpu, f, n in rows} == want
    assert len({cpu for cpu, _, _ in rows}) == 4 and len(rows) > 20


@pytest.mark.parametrize("which", ["exported", "exported_damaged"])
def test_kinds_and_errors_are_decode_stat_and_check(request, poketrace, which):
    out, _ = request.getfixturevalue(which)
    trace = request.getfixturevalue("damaged" if which == "exported_damaged" else "trace")
    s, c = stat(poketrace, trace), check(poketrace, trace)
    kinds = dict(queries.run(out, "branches_per_kind")[1])
    assert kinds.get("jcc") == s["cond_taken"]
    assert kinds.get("jmp") == s["jumps"] + s["indirect_jumps"]
    assert kinds.get("call") == s["calls"] + s["indirect_calls"]
    assert kinds.get("return") == s["returns"]
    branches = sum(n for k, n in kinds.items() if k != "error")
    counted = ["cond_taken", "jumps", "indirect_jumps", "calls", "indirect_calls", "returns", "far", "traps", "trace_starts", "trace_ends"]
    assert branches == sum(s[k] for k in counted)
    errors = dict(queries.run(out, "errors_per_cpu")[1])
    assert sum(errors.values()) == kinds.get("error", 0) == s["errors"] == c["errors"]
    assert {cpu: errors.get(cpu, 0) for cpu in range(4)} == {i: cpu["errors"] for i, cpu in enumerate(c["cpus"])}
    if which == "exported_damaged":
        assert s["errors"] >= 1


def test_uncertain_spans(exported_insns, poketrace, trace):
    out, _ = exported_insns
    columns, rows = queries.run(out, "uncertain_spans")
    decoded = lines(poketrace, trace, "i")
    # The runs of uncertain instructions of each CPU, in trace order.
    want, run_of = [], {}
    for line in decoded:
        cpu = line["cpu"]
        if not line["uncertain"]:
            run_of.pop(cpu, None)
        elif cpu in run_of:
            run_of[cpu].update(time_to=line["time"], insns=run_of[cpu]["insns"] + 1)
        else:
            run_of[cpu] = {"cpu": cpu, "time_from": line["time"], "time_to": line["time"], "first_ip": line["ip"], "first_sym": function(line["sym"]), "insns": 1}
            want.append(run_of[cpu])
    got = [dict(zip(columns, r)) for r in rows]
    for g in got:
        del g["buffer"]
    key = lambda r: (r["cpu"], r["time_from"], r["first_ip"])  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    assert sum(r["insns"] for r in want) == stat(poketrace, trace)["uncertain"] == check(poketrace, trace)["uncertain"] >= 1
    instructions = dict(queries.run(out, "branches_per_kind")[1])["insn"]
    assert instructions == stat(poketrace, trace)["instructions"]


def test_between_pokes(exported_insns, poketrace, trace):
    """Instructions at each poked site between its pokes, by what the poke wrote."""
    out, _ = exported_insns
    columns, rows = queries.run(out, "between_pokes")
    pokes = [json.loads(line) for line in run(poketrace, "pokes", trace, "--json").splitlines()]
    pokes = sorted((p for p in pokes if p["record"] == "TEXT_POKE" and p.get("time") is not None), key=lambda p: p["time"])
    by_site = defaultdict(list)
    for p in pokes:
        by_site[p["addr"]].append(p)
    covering = defaultdict(list)  # byte address: the sites whose poked bytes hold it
    for site, ps in by_site.items():
        for p in ps:
            for a in range(site, site + len(p["new"]) // 2):
                if site not in covering[a]:
                    covering[a].append(site)
    want = Counter()
    for line in lines(poketrace, trace, "i"):
        for site in covering.get(line["ip"], []):
            ps = by_site[site]
            at = bisect.bisect_right([p["time"] for p in ps], line["time"]) - 1
            if at < 0:
                continue
            p = ps[at]
            if line["ip"] >= site + len(p["new"]) // 2:
                continue
            until = ps[at + 1]["time"] if at + 1 < len(ps) else None
            want[(site, p["sym"] or None, p["time"], until, p["kind"], p["new"].upper(), line["cpu"], "insn", None)] += 1
    got = {tuple(r[:-1]): r[-1] for r in rows}
    assert columns[-1] == "n" and got == dict(want)
    assert len(got) > 10
