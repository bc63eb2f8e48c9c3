"""A hostile pass over the CLI (issue 26, second round): 35 cases, each held or failed, with its wall
time and the last stderr line. Run by hand: `python bench/hostile/run_pass.py [N ...]` (as root for the
no-temp-folder cases, which use a mount namespace: unshare -m). Kills stray `sleep 300` helpers."""
import json, os, re, shutil, subprocess, sys, tempfile, time
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = tempfile.mkdtemp(prefix="warmprof-hostile-")
W = [sys.executable, "-m", "warmprof"]
NOTMP = ["unshare", "-m", "sh", os.path.join(HERE, "no_temp_folder.sh")]
M = os.path.join(HERE, "models.py")
BASE = ["--shape", "4,16", "--steady", "5", "--quiet"]
def sleeps():
    out = subprocess.run(["pgrep", "-f", "^sleep 300"], capture_output=True, text=True).stdout.split()
    return [p for p in out if open(f"/proc/{p}/stat").read().rsplit(")",1)[1].split()[0] != "Z"] if out else []
def kill_sleeps():
    subprocess.run(["pkill", "-9", "-f", "^sleep 300"])
cases = []
def case(name, argv, rc, pattern="", where="err", env=None, shell=None, max_s=120, no_sleeps=True, check=None):
    cases.append(dict(name=name, argv=argv, rc=rc, pattern=pattern, where=where, env=env, shell=shell, max_s=max_s,
                      no_sleeps=no_sleeps, check=check))
T = [*W, "trace", f"{M}:make", *BASE]
case("helper holding stdout, | cat", None, 0, "the model left running: sleep", shell=f"ACT=helper {' '.join(T)} | cat", max_s=60)
case("helper in its own session holding stdout, | cat", None, 0, "left running", shell=f"ACT=pgrp_helper {' '.join(T)} | cat", max_s=60)
case("os.fork()ed python child of the model", T, 0, "left running", env={"ACT": "fork"})
case("--repeat 2 with a helper", [*T, "--repeat", "2"], 0, "2 runs of", where="out", env={"ACT": "helper"}, max_s=90)
case("--explain with a helper", [*T, "--explain", "--explain-top", "1"], 0, "warmprof trace", where="out", env={"ACT": "helper"}, max_s=180)
case("--timeout, model hangs in forward", [*T, "--timeout", "8"], 124, r"ran past --timeout 8 s and was stopped while running the model's (clean )?first pass", env={"ACT": "hang"})
case("--timeout, model ignores SIGTERM and hangs", [*T, "--timeout", "8", "--no-control"], 124, "ran past --timeout 8 s", env={"ACT": "ignterm_hang"}, max_s=40)
case("--timeout --in-process, model hangs", [*T, "--timeout", "6", "--in-process"], 124, "ran past --timeout 6 s", env={"ACT": "hang"}, max_s=40)
case("--timeout --in-process, model installs its own SIGALRM handler", [*T, "--timeout", "6", "--in-process"], 124, "ran past --timeout", env={"ACT": "alarm"}, max_s=60)
case("--timeout nan", [*T, "--timeout", "nan"], 2, "--timeout nan: give seconds")
case("--timeout -1", [*T, "--timeout", "-1"], 2, "--timeout -1: give seconds")
case("--timeout 1e12", [*T, "--timeout", "1e12"], 2, "at most 604800")
case("probe --timeout 1 (built-in)", [*W, "probe", "--timeout", "1", "--quiet"], 124, "warmprof probe ran past --timeout 1 s")
case("probe --op-timeout 0.5 (below the 1 s floor): named as the option", [*W, "probe", "--ops", "gelu", "--op-timeout", "0.5", "--quiet"], 2, "--op-timeout 0.5: give seconds from 1 to 86400")
case("model closes fd 2", T, 0, "warmprof trace", where="out", env={"ACT": "close2"})
case("model sets sys.stderr = None", T, 0, "warmprof trace", where="out", env={"ACT": "stderr_none"})
case("model dup2s /dev/null onto fd 1", T, 0, "warmprof trace", where="out", env={"ACT": "devnull1"})
case("model leaves a partial line on stdout", T, 0, r"no newline here", where="out", env={"ACT": "partial"})
case("PYTHONIOENCODING=latin-1", T, 0, "warmprof trace", where="out", env={"ACT": "", "PYTHONIOENCODING": "latin-1"})
case("PYTHONIOENCODING=ascii:strict, --in-process", [*T, "--in-process"], 0, "warmprof trace", where="out", env={"ACT": "", "PYTHONIOENCODING": "ascii:strict"})
case("model chdir('/') with a relative --json", [*T, "--json", "rel.json"], 0, "report saved to", env={"ACT": "chdir"},
     check=lambda: os.path.exists(os.path.join(WORK, "rel.json")) or "rel.json not in the starting folder")
case("model raises SystemExit(0) in forward", T, 4, "the model raised on the first pass: SystemExit: 0", env={"ACT": "sysexit"})
case("model raises KeyboardInterrupt in forward", T, 130, "interrupted", env={"ACT": "kbint"})
case("factory calls sys.exit(0)", [*W, "trace", f"{M}:factory_exit", *BASE], 2, "the factory .* raised: SystemExit: 0", env={"ACT": ""})
case("model thread os._exit(3) mid-trace", [*T, "--no-control"], 4, r"exited \(status 3\) without writing its report, while ", env={"ACT": "threads_exit"})
case("probe --ops aten.__class__.__init__", [*W, "probe", "--ops", "aten.__class__.__init__"], 2, "no aten op named '__class__'")
case("probe --ops add.__call__", [*W, "probe", "--ops", "add.__call__"], 2, "no overload '__call__'")
case("probe --ops layer_norm:100000x100000 (37 GiB input)", [*W, "probe", "--ops", "layer_norm:100000x100000"], 2, "GiB")
case("buckets a 400-digit length", [*W, "buckets", "--lengths", "3," + "9" * 400, "--compile-ms", "1", "--per-token-ms", "1"], 2, "longer than any context")
case("buckets --per-token-ms 1e300", [*W, "buckets", "--lengths", "3,5", "--compile-ms", "1", "--per-token-ms", "1e300"], 2, r"more than 1e\+09")
case("--json with a 255-byte UTF-8 name", [*T, "--json", WORK + "/" + "é" * 126 + ".js"], 0, "report saved to", env={"ACT": ""})
case("--json with a 256-byte UTF-8 name, refused up front", [*T, "--json", WORK + "/" + "é" * 126 + ".jso"], 2, "256 bytes long", env={"ACT": ""}, max_s=10)
case("no temp folder: trace --repeat", [*NOTMP, *T, "--repeat", "2"], 2, "no usable temporary folder for the runs' reports", env={"ACT": ""})
case("no temp folder: probe --ops gelu", [*NOTMP, *W, "probe", "--ops", "gelu"], 2, "no usable temporary folder for the op's fresh process")
case("no temp folder: watch --demo", [*NOTMP, *W, "watch", "--demo"], 2, "no usable temporary folder")
only = sys.argv[1:]
held = 0
for i, c in enumerate(cases, 1):
    if only and str(i) not in only:
        continue
    kill_sleeps()
    env = dict(os.environ, **(c["env"] or {}))
    t0 = time.monotonic()
    try:
        if c["shell"]:
            p = subprocess.run(["bash", "-c", "set -o pipefail; " + c["shell"]], capture_output=True, text=True, timeout=c["max_s"], env=env, cwd=WORK)
        else:
            p = subprocess.run(c["argv"], capture_output=True, text=True, timeout=c["max_s"], env=env, cwd=WORK, errors="replace")
        wall = time.monotonic() - t0
        text = p.stderr if c["where"] == "err" else p.stdout
        why = []
        if c["rc"] is not None and p.returncode != c["rc"]:
            why.append(f"rc {p.returncode} (want {c['rc']})")
        if c["pattern"] and not re.search(c["pattern"], text):
            why.append(f"no /{c['pattern']}/ in {c['where']}")
        if c["no_sleeps"]:
            time.sleep(0.5)
            left = sleeps()
            if left:
                why.append(f"{len(left)} helper(s) left running")
        if c["check"]:
            r = c["check"]()
            if r is not True:
                why.append(str(r))
        last = (p.stderr.strip().splitlines() or [""])[-1][:160]
    except subprocess.TimeoutExpired:
        wall, why, last = time.monotonic() - t0, [f"still running after {c['max_s']} s"], ""
    ok = not why
    held += ok
    print(f"{i:2d} {'HELD  ' if ok else 'FAILED'} {wall:5.1f}s  {c['name']}" + ("" if ok else f"  <- {'; '.join(why)}") + f"\n      last stderr: {last}", flush=True)
kill_sleeps()
print(f"held {held} of {len(cases) if not only else len(only)}")
shutil.rmtree(WORK, ignore_errors=True)
