#!/usr/bin/env python3
"""Static gates of the CUDA kernels, applied to the built fatbin (ci.sh).

    check_gates.py --cuobjdump PATH --fatbin FILE --dir kernels/cuda [--write]

Data-driven: the checks live in kernels/cuda/gates/*.tsv (one file per owner:
sm100.tsv for the tcgen05 kernels, portable.tsv for the portable kernels,
sm90_sm80.tsv for the Hopper / Ampere tensor-core kernels, sm80_qfwd.tsv and
sm90_qfwd.tsv for the query-major prefill). All files are
read and their rows pooled.

1. The expected kernel set is every "msa_*" string constant declared in
   kernels/cuda/fatbin/*.go (e.g. `SM100FwdBF16D64 = "msa_sm100_fwd_bf16_d64"`);
   every SASS image of the fatbin must hold exactly that set.
2. Every (kernel, image) pair must match at least one gate row and must pass
   every row it matches.

GATE FILE FORMAT (gates/*.tsv). UTF-8 text, one gate per line, fields
separated by ONE tab character; blank lines and lines starting with '#' are
ignored. 10 fields, an 11th (note) is optional; '-' means "no check" in every
field except max_stack, where '-' means 0:

  #  field      meaning
  1  kernel     Python regex searched in the kernel name (re.search; anchor
                with ^...$ to match whole names)
  2  arch       Python regex matched against the WHOLE image architecture
                (re.fullmatch), as cuobjdump -res-usage names it: sm_80,
                sm_90a, sm_100f
  3  require    comma-separated items; an item is one or more SASS opcodes
                joined by '|' (any of them suffices); each item must occur at
                least once. An opcode matches an instruction whose mnemonic
                equals it or starts with it followed by '.': UTMALDG matches
                UTMALDG.3D, BPT matches BPT.TRAP
  4  forbid     comma-separated opcodes that must not occur (same matching;
                the pseudo-opcode vprintf matches a call to vprintf;
                UTCHMMA:tmemA and UTCQMMA:tmemA match a tcgen05.mma whose
                A operand is in tensor memory: its first operand tmem[..])
  5  min_instr  minimum SASS instruction count (catches stub bodies)
  6  max_regs   maximum registers per thread (cuobjdump -res-usage REG)
  7  max_stack  maximum STACK + LOCAL bytes ('-' = 0: no local memory)
  8  dyn_smem   the dynamic shared memory the launcher requests; the kernel
                table in kernels/cuda/fatbin/*.go ({Name: Const, ..., DynSmem: N,
                ..., TMEMCols: N}, or HopperAmpereLaunch's Const: {Threads: N,
                DynSmem: N}) must say the same, and static + dynamic
                shared memory must fit in 232448 bytes
  9  tmem_cols  tensor-memory columns the kernel allocates (<= 512); the
                kernel table must say the same, and every tcgen05.alloc of
                the image (UTCATOMSWS.FIND_AND_SET; its granule count is a
                UMOV immediate) must allocate exactly this many
 10  note       free text (a stack allowance must say why here)

Example (tabs shown as <TAB>):
  ^msa_sm100_fwd_bf16_d128$<TAB>sm_100f<TAB>UTCHMMA,UTMALDG,LDTM<TAB>LDL,STL<TAB>300<TAB>160<TAB>-<TAB>99360<TAB>256<TAB>note

3. The table of every kernel x image (instruction mix, registers, shared
   memory, stack, dynamic shared memory and TMEM columns of the kernel
   table) is written to gates/sass_table.md (--write) or compared with the
   committed file (CI fails when it is stale).
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys

MAX_SMEM = 232448
MIX = ["UTCHMMA", "UTCQMMA", "HGMMA", "HMMA", "UTMALDG", "LDTM", "STTM", "UTCBAR", "LDGSTS", "LDSM", "FFMA"]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def go_files(d):
    """The Go files of package fatbin (kernels/cuda/fatbin), which name the kernels."""
    return sorted(glob.glob(os.path.join(d, "fatbin", "*.go")))


def expected_kernels(d):
    names = set()
    for f in go_files(d):
        for m in re.finditer(r'^\s*[A-Za-z0-9_]+\s*(?:[A-Za-z0-9_.]+\s*)?=\s*"(msa_[a-z0-9_]+)"', open(f).read(), re.M):
            names.add(m.group(1))
    return names


def kernel_table(d):
    """DynSmem / TMEMCols of the kernel tables in kernels/cuda/fatbin/*.go, by kernel name."""
    src = "".join(open(f).read() for f in go_files(d))
    consts = dict(re.findall(r'^\s*([A-Za-z0-9_]+)\s*=\s*"(msa_[a-z0-9_]+)"', src, re.M))
    out = {}
    for m in re.finditer(r"\{Name:\s*([A-Za-z0-9_]+),[^}]*?DynSmem:\s*(\d+),[^}]*?TMEMCols:\s*(\d+)", src):
        out[consts.get(m.group(1), m.group(1))] = (int(m.group(2)), int(m.group(3)))
    # HopperAmpereLaunch (names_hopper_ampere.go): `Const: {Threads: N, DynSmem: M}`, no tensor memory
    for m in re.finditer(r"^\s*([A-Za-z0-9_]+):\s*\{Threads:\s*\d+,\s*DynSmem:\s*(\d+)\}", src, re.M):
        out[consts.get(m.group(1), m.group(1))] = (int(m.group(2)), 0)
    return out


TMEM_ALLOC_RE = re.compile(r"UTCATOMSWS\.FIND_AND_SET\S*\s+[^,]+,\s*UR\d+,\s*(UR\d+)")


def tmem_allocs(lines):
    """Column counts of the tcgen05.alloc instructions of one kernel image.

    tcgen05.alloc assembles to UTCATOMSWS.FIND_AND_SET whose last operand holds
    the number of 32-column granules, set by a UMOV immediate a few
    instructions before. None for an allocation whose size is not such an
    immediate (a gate on tmem_cols then fails)."""
    out = []
    for i, line in enumerate(lines):
        m = TMEM_ALLOC_RE.search(line)
        if not m:
            continue
        size = None
        for j in range(i - 1, max(i - 24, -1), -1):
            mm = re.search(r"\bUMOV\s+%s,\s*(0x[0-9a-f]+|\d+)\s*;" % m.group(1), lines[j])
            if mm:
                size = int(mm.group(1), 0) * 32
                break
            if re.search(r"\b%s\b" % m.group(1), lines[j]):
                break  # written otherwise: not an immediate
        out.append(size)
    return out


def parse_sass(text, lines=None):
    """{(arch, fn): Counter of mnemonics (with the full dotted form under key '.'+full)} + instr count.
    With `lines` (a dict), also collect the instruction text per (arch, fn)."""
    arch, fn = None, None
    ops = collections.defaultdict(collections.Counter)
    for line in text.splitlines():
        m = re.search(r"code for (sm_[0-9a-z]+)", line)
        if m:
            arch, fn = m.group(1), None
            continue
        m = re.search(r"Function : (\S+)", line)
        if m:
            fn = m.group(1)
            ops[(arch, fn)]["#instr"] += 0
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)(.*)", line)
        if m and fn:
            c = ops[(arch, fn)]
            c["#instr"] += 1
            if lines is not None:
                lines.setdefault((arch, fn), []).append(m.group(1) + m.group(2))
            full = m.group(1)
            parts = full.split(".")
            for i in range(1, len(parts) + 1):
                c[".".join(parts[:i])] += 1
            if "vprintf" in m.group(2):
                c["vprintf"] += 1
            if parts[0] in ("UTCHMMA", "UTCQMMA") and m.group(2).strip().startswith("tmem["):
                c[parts[0] + ":tmemA"] += 1
    return ops


def parse_res(text):
    arch, res, fn = None, {}, None
    for line in text.splitlines():
        m = re.match(r"arch = (sm_[0-9a-z]+)", line.strip())
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"Function (\S+):", line.strip())
        if m:
            fn = m.group(1)
            continue
        if line.strip().startswith("REG:") and fn:
            kv = dict(x.split(":", 1) for x in line.split())
            res[(arch, fn)] = {k: int(v) for k, v in kv.items() if v.isdigit()}
            fn = None
    return res


def load_gates(d):
    rows = []
    for f in sorted(glob.glob(os.path.join(d, "gates", "*.tsv"))):
        for n, line in enumerate(open(f), 1):
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 10:
                sys.exit(f"check_gates: {f}:{n}: {len(cols)} columns, want 10 or 11")
            rows.append((f"{os.path.basename(f)}:{n}", cols))
    return rows


def occurs(c, op):
    return c.get(op, 0) > 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuobjdump", required=True)
    ap.add_argument("--fatbin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()

    names = expected_kernels(a.dir)
    if not names:
        sys.exit("check_gates: no msa_* kernel names declared in kernels/cuda/fatbin/*.go")
    res = parse_res(run([a.cuobjdump, "-res-usage", a.fatbin]))
    sass_lines = {}
    sass_ops = parse_sass(run([a.cuobjdump, "-sass", a.fatbin]), sass_lines)
    # cuobjdump -sass prints the family image sm_100f as "sm_100"; -res-usage
    # names it exactly: map SASS arch names onto the res-usage ones.
    res_archs = sorted({k[0] for k in res})
    def canon(arch):
        if arch in res_archs:
            return arch
        fam = [r for r in res_archs if r.rstrip("af") == arch]
        return fam[0] if len(fam) == 1 else arch
    ops = {(canon(k[0]), k[1]): v for k, v in sass_ops.items()}
    instr_lines = {(canon(k[0]), k[1]): v for k, v in sass_lines.items()}
    archs = sorted({k[0] for k in ops})
    fail = []
    for arch in archs:
        got = {k[1] for k in ops if k[0] == arch}
        if got != names:
            fail.append(f"{arch}: kernels missing {sorted(names - got)}, unexpected {sorted(got - names)}")
    table = kernel_table(a.dir)
    gates = load_gates(a.dir)
    for (arch, fn), c in sorted(ops.items()):
        r = res.get((arch, fn), {})
        matched = 0
        for where, cols in gates:
            kre, are, req, forbid, min_instr, max_regs, max_stack, dyn, tmem = cols[:9]
            if not re.search(kre, fn) or not re.fullmatch(are, arch):
                continue
            matched += 1
            tag = f"{fn} {arch} ({where})"
            if req != "-":
                for item in req.split(","):
                    if not any(occurs(c, op) for op in item.split("|")):
                        fail.append(f"{tag}: no {item}")
            if forbid != "-":
                for op in forbid.split(","):
                    if occurs(c, op):
                        fail.append(f"{tag}: forbidden {op} x{c[op]}")
            if min_instr != "-" and c["#instr"] < int(min_instr):
                fail.append(f"{tag}: {c['#instr']} instructions < {min_instr} (a stub?)")
            if max_regs != "-" and r.get("REG", 0) > int(max_regs):
                fail.append(f"{tag}: {r.get('REG')} registers > {max_regs}")
            stack = r.get("STACK", 0) + r.get("LOCAL", 0)
            if stack > (0 if max_stack == "-" else int(max_stack)):
                fail.append(f"{tag}: stack/local {stack} bytes > {max_stack}")
            if dyn != "-":
                want = table.get(fn)
                if want is None or want[0] != int(dyn):
                    fail.append(f"{tag}: dynamic smem {dyn} in the gate, kernel table says {want and want[0]}")
                if r.get("SHARED", 0) + int(dyn) > MAX_SMEM:
                    fail.append(f"{tag}: {r.get('SHARED', 0)} static + {dyn} dynamic shared memory > {MAX_SMEM}")
            if tmem != "-":
                want = table.get(fn)
                if int(tmem) > 512 or want is None or want[1] != int(tmem):
                    fail.append(f"{tag}: TMEM columns {tmem} (kernel table: {want and want[1]}; max 512)")
                allocs = tmem_allocs(instr_lines.get((arch, fn), []))
                if not allocs or any(x != int(tmem) for x in allocs):
                    fail.append(f"{tag}: tcgen05.alloc sizes in the SASS {allocs}, gate says {tmem} columns")
        if matched == 0:
            fail.append(f"{fn} {arch}: no gate row matches (add one to gates/*.tsv)")

    lines = [
        "# SASS table of msa_kernels.fatbin",
        "",
        "Generated by `kernels/cuda/gates/check_gates.py --write` (run by `ci.sh`, which fails when",
        "this file differs from what the committed fatbin gives). Counts are SASS instructions per",
        "kernel image; regs / shared (static bytes) / stack from `cuobjdump -res-usage`. A 'trap' image",
        "is a kernel whose architecture it cannot run on: its body is a trap.",
        "",
        "| kernel | arch | instrs | " + " | ".join(MIX) + " | regs | shared | stack | dyn smem | TMEM cols |",
        "|---|---|---:|" + "---:|" * len(MIX) + "---:|---:|---:|---:|---:|",
    ]
    for fn in sorted(names):
        for arch in archs:
            c = ops.get((arch, fn))
            if c is None:
                continue
            r = res.get((arch, fn), {})
            kind = " (trap)" if occurs(c, "BPT.TRAP") and c["#instr"] < 100 else ""
            dyn, tm = table.get(fn, ("-", "-")) if not kind else ("-", "-")
            lines.append(f"| `{fn}` | {arch}{kind} | {c['#instr']} | " + " | ".join(str(c.get(op, 0)) for op in MIX) +
                         f" | {r.get('REG', 0)} | {r.get('SHARED', 0)} | {r.get('STACK', 0)} | {dyn} | {tm} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    path = os.path.join(a.dir, "gates", "sass_table.md")
    if a.write:
        open(path, "w").write(text)
    elif not os.path.exists(path) or open(path).read() != text:
        fail.append("sass_table.md is stale: run kernels/cuda/gates/check_gates.py --write (see ci.sh) and commit it")
    if fail:
        for f in fail:
            print("check_gates: FAIL: " + f, file=sys.stderr)
        sys.exit(1)
    print(f"check_gates: {len(ops)} kernel images ({len(names)} kernels x {len(archs)} archs) pass {len(gates)} gate rows",
          file=sys.stderr)


if __name__ == "__main__":
    main()
