"""`poketrace decode --json` lines as the rows `poketrace export` writes for them."""

import json

from datasets import run


def lines(poketrace, trace, itrace):
    """The decode's lines, parsed (exit status 1: the trace has decode errors)."""
    out = run(poketrace, "decode", trace, "--json", f"--itrace={itrace}", ok=(0, 1))
    return [json.loads(line) for line in out.splitlines()]


def function(sym):
    """`name` of `name+0xoff`; None for no symbol."""
    return sym.rsplit("+0x", 1)[0] if sym else None


def as_row(line):
    """The export row of a decode line: a branch, an instruction or an error; all columns but
    `insns`, which decode's lines do not carry (export's own tests check it)."""
    if "error" in line:
        kind = "error"
    elif "flags" in line:
        kind = " ".join(line["flags"])
    else:
        kind = "insn"
    return {
        "time": line["time"],
        "cpu": line["cpu"],
        "pid": line.get("pid"),
        "tid": line.get("tid"),
        "ip": line.get("ip"),
        "addr": line.get("addr"),
        "kind": kind,
        "sym": function(line.get("sym")),
        "addr_sym": function(line.get("addr_sym")),
        "uncertain": line.get("uncertain", False),
        "error": line.get("error"),
    }
