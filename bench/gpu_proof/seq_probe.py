"""Raw CUPTI callback sequences, one per operation, with no warmprof code in the way (ctypes on the
libcupti torch mapped), then warmprof's own subscriber on the same kind of operation: the
differential that tells "the platform refused CUPTI" (the raw subscribe fails too) from "warmprof
is broken" (the raw one works, warmprof's does not).

    python3 seq_probe.py OUT.json

Per callback: domain, name, site, thread, nesting (the open API call it sits in), enter->exit time;
launches: whether functionParams is NULL (nvcc 13's __cudaLaunchKernel has no params struct), its
first pointer (the kernel key warmprof reads), symbolName; MODULE_LOADED: cubin size and magic (ELF
or fatbin: what the loaded image is). In order, each saved as it ends:
  subscribe       cuptiSubscribe_v2 (names the holder when another subscriber has CUPTI) or v1
  steps           the operations below under the raw subscriber
  warmprof_fresh  warmprof's subscriber in a fresh process around a never-used kernel (the differential)
  warmprof_silu   warmprof's subscriber in this process after the raw one left
  allocators      warmprof's subscriber around one 256 MiB tensor under the three allocator settings
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proof_common import exit_if_no_gpu, last_json_line, left_s, save  # noqa: E402

OUT = sys.argv[1]
exit_if_no_gpu(OUT)  # imports torch first: its CUDA wheels map their libcupti, the one to use

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

result: dict = {"errors": []}
maps = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "libcupti" in ln})
result["libcupti"] = maps
torch.zeros(1, device="cuda")
torch.cuda.synchronize()


class CBData(ctypes.Structure):  # CUpti_CallbackData (cupti_callbacks.h, CUDA 13.0)
    _fields_ = [("site", ctypes.c_int), ("functionName", ctypes.c_char_p), ("functionParams", ctypes.c_void_p),
                ("functionReturnValue", ctypes.c_void_p), ("symbolName", ctypes.c_char_p),
                ("context", ctypes.c_void_p), ("contextUid", ctypes.c_uint32),
                ("correlationData", ctypes.c_void_p), ("correlationId", ctypes.c_uint32)]


class ResData(ctypes.Structure):  # CUpti_ResourceData
    _fields_ = [("context", ctypes.c_void_p), ("handle", ctypes.c_void_p), ("desc", ctypes.c_void_p)]


class ModData(ctypes.Structure):  # CUpti_ModuleResourceData
    _fields_ = [("moduleId", ctypes.c_uint32), ("cubinSize", ctypes.c_size_t), ("pCubin", ctypes.c_void_p)]


class SubParams(ctypes.Structure):  # CUpti_SubscriberParams (CUPTI 13)
    _fields_ = [("structSize", ctypes.c_size_t), ("subscriberName", ctypes.c_char_p),
                ("oldSubscriberName", ctypes.c_void_p), ("oldSubscriberSize", ctypes.c_size_t)]


RES = {1: "CONTEXT_CREATED", 3: "STREAM_CREATED", 5: "CU_INIT_FINISHED", 6: "MODULE_LOADED",
       7: "MODULE_UNLOAD_STARTING", 9: "GRAPH_CREATED", 13: "GRAPHNODE_CREATED",
       17: "GRAPHEXEC_CREATE_STARTING", 18: "GRAPHEXEC_CREATED"}
LAUNCH = ("cuLaunch", "cudaLaunch", "__cudaLaunch")
MAX_EVENTS = 20000  # per step
label: list = [None]
events: list = []
tls = threading.local()


def on_cb(_u, domain, cbid, data):
    try:
        if label[0] is None or len(events) > MAX_EVENTS:
            return
        t = time.perf_counter_ns()
        st = getattr(tls, "stack", None)
        if st is None:
            st = tls.stack = []
        if domain in (1, 2):
            d = ctypes.cast(data, ctypes.POINTER(CBData)).contents
            name = (d.functionName or b"?").decode(errors="replace")
            ev = {"t": t, "tid": threading.get_ident(), "dom": "drv" if domain == 1 else "rt", "cbid": int(cbid),
                  "name": name, "site": int(d.site), "depth": len(st), "in": st[-1][0] if st else None}
            if d.site == 0:
                if name.startswith(LAUNCH):
                    ev["params_null"] = not d.functionParams
                    if d.functionParams:
                        ev["first_ptr"] = ctypes.cast(d.functionParams, ctypes.POINTER(ctypes.c_void_p))[0]
                    ev["symbol"] = (d.symbolName or b"").decode(errors="replace")[:160]
                st.append((name, t))
            else:
                for i in range(len(st) - 1, -1, -1):
                    if st[i][0] == name:
                        ev["dur_us"] = (t - st[i][1]) / 1e3
                        del st[i:]
                        ev["depth"] = i
                        ev["in"] = st[-1][0] if st else None
                        break
            events.append(ev)
        elif domain == 3:
            ev = {"t": t, "tid": threading.get_ident(), "dom": "res", "cbid": int(cbid),
                  "name": RES.get(int(cbid), f"res{int(cbid)}"), "depth": len(st), "in": st[-1][0] if st else None}
            if cbid == 6 and data:
                r = ctypes.cast(data, ctypes.POINTER(ResData)).contents
                if r.desc:
                    m = ctypes.cast(r.desc, ctypes.POINTER(ModData)).contents
                    ev["cubin_size"] = int(m.cubinSize)
                    if m.pCubin and m.cubinSize >= 4:
                        ev["magic"] = ctypes.string_at(m.pCubin, 4).hex()
            events.append(ev)
    except Exception as e:  # never raise into CUDA
        if len(result["errors"]) < 20:
            result["errors"].append(repr(e)[:200])


def subscribe(lib, cb) -> tuple[ctypes.c_void_p, dict]:
    handle = ctypes.c_void_p()
    old = ctypes.create_string_buffer(128)
    if hasattr(lib, "cuptiSubscribe_v2"):
        params = SubParams(ctypes.sizeof(SubParams), b"warmprof-proof", ctypes.cast(old, ctypes.c_void_p), 128)
        r = lib.cuptiSubscribe_v2(ctypes.byref(handle), cb, None, ctypes.byref(params))
        api = "v2"
    else:
        r = lib.cuptiSubscribe(ctypes.byref(handle), cb, None)
        api = "v1"
    text = ctypes.c_char_p()
    lib.cuptiGetResultString(r, ctypes.byref(text))
    return handle, {"api": api, "result": int(r), "text": (text.value or b"").decode(),
                    "holder": old.value.decode(errors="replace")}


def operations() -> list:
    y = torch.randn(1 << 20, device="cuda")
    m32 = torch.randn(512, 512, device="cuda")
    xb = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    wb = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    bb = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    z = torch.zeros(4096, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        z.add_(1)
    host = torch.ones(16 << 20, dtype=torch.uint8)
    keep: list = []
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()

    def capture() -> None:
        with torch.cuda.graph(graph):
            z.add_(1)

    def new_segment() -> None:
        torch.cuda.empty_cache()
        keep.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))

    return [
        ("gelu_first", lambda: F.gelu(y)),  # precompiled torch kernel, never used: cu13 launch path + lazy load
        ("gelu_second", lambda: F.gelu(y)),
        ("gelu_tanh_first", lambda: F.gelu(y, approximate="tanh")),  # same TU, other kernel: function-only lazy load?
        ("cumsum_first", lambda: torch.cumsum(y, 0)),  # cub: occupancy queries before the launch
        ("i0e_first", lambda: torch.special.i0e(y)),  # jiterator: NVRTC compile, then cuModuleLoadData(cubin)
        ("i0e_second", lambda: torch.special.i0e(y)),
        ("mm_first", lambda: m32 @ m32),  # cuBLAS handle, workspace, kernel load
        ("mm_second", lambda: m32 @ m32),
        ("linear_bf16_first", lambda: F.linear(xb, wb, bb)),  # cuBLASLt (bias epilogue)
        ("linear_bf16_second", lambda: F.linear(xb, wb, bb)),
        ("new_segment", new_segment),
        ("h2d_pageable", lambda: keep.append(host.to("cuda"))),
        ("capture", capture),
        ("replay_first", graph.replay),
        ("replay_second", graph.replay),
    ]


KEEP_RAW = {"gelu_first", "gelu_tanh_first", "cumsum_first", "i0e_first", "mm_first", "linear_bf16_first", "capture"}
RAW_KEPT = 600  # events of a kept step (the JSON stays about 1 MB)


def step_record(key: str, ms: float, evs: list) -> dict:
    counts: dict = {}
    for e in evs:
        if e["dom"] == "res" or e["site"] == 0:
            k = f"{e['dom']}:{e['name']}" + (f" in {e['in']}" if e["in"] else "")
            counts[k] = counts.get(k, 0) + 1
    longest = sorted((e for e in evs if "dur_us" in e), key=lambda e: -e["dur_us"])[:12]
    return {
        "ms": ms, "callbacks": len(evs), "counts": counts,
        "launches": [e for e in evs if e.get("name", "").startswith(LAUNCH) and e.get("site") == 0][:8],
        "module_loaded": [e for e in evs if e["name"] == "MODULE_LOADED"][:16],
        "longest": [{"name": e["name"], "dom": e["dom"], "in": e["in"], "dur_us": e["dur_us"]} for e in longest],
        "raw": evs[:RAW_KEPT] if key in KEEP_RAW else None,
    }


def raw_steps(lib) -> None:
    cb = CB(on_cb)
    KEEP_ALIVE.append(cb)  # CUPTI may hold the trampoline past the unsubscribe: never freed
    handle, sub = subscribe(lib, cb)
    result["subscribe"] = sub
    save(OUT, result)
    if sub["result"] != 0:  # the platform or another tool refused a plain subscriber: no warmprof code involved
        return
    result["enable"] = {dom: lib.cuptiEnableDomain(1, handle, dom) for dom in (1, 2, 3)}
    steps: dict = {}
    try:
        for key, fn in operations():
            torch.cuda.synchronize()
            events.clear()
            label[0] = key
            t0 = time.perf_counter_ns()
            try:
                fn()
                torch.cuda.synchronize()
            except Exception as e:
                result["errors"].append(f"{key}: {e!r}"[:300])
            t1 = time.perf_counter_ns()
            label[0] = None
            steps[key] = step_record(key, (t1 - t0) / 1e6, list(events))
            result["steps"] = steps
            result["raw_callbacks"] = sum(s["callbacks"] for s in steps.values())
            save(OUT, result)
    finally:
        result["unsubscribe"] = int(lib.cuptiUnsubscribe(handle))
    save(OUT, result)


CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
KEEP_ALIVE: list = []

# warmprof's subscriber in a fresh process, on a kernel it never ran: why it is off (''), and what it saw.
WARMPROF_FRESH = r"""
import json, torch
import torch.nn.functional as F
from warmprof import _native
from warmprof.timeline import Recording
y = torch.randn(1 << 20, device='cuda'); torch.cuda.synchronize()
with Recording():
    why = _native.cupti_start()
    s0 = _native.cupti_stats()
    F.gelu(y); torch.cuda.synchronize()
    s1 = _native.cupti_stats()
    stop = _native.cupti_stop() if not why else ''
print(json.dumps({'why': why, 'stop': stop, 'callbacks': s1['callbacks'] - s0['callbacks'],
                  'launches': s1['kernel_launches'] - s0['kernel_launches'],
                  'new_kernels': s1['new_kernel_count'] - s0['new_kernel_count'], 'refused': s1['refused_callbacks'],
                  'backend': _native.backends()['cupti']}))
"""


def child(code: str, default_s: float, env: dict | None = None) -> dict:
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=left_s(default_s),
                           env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    got = last_json_line(p.stdout)
    return got if p.returncode == 0 and isinstance(got, dict) else {"rc": p.returncode, "err": p.stderr[-800:]}


def warmprof_here() -> dict:
    """warmprof's subscriber in this process, after the raw one left: a never-used kernel."""
    try:
        from warmprof import _native
        from warmprof.attribution import build_spans
        from warmprof.timeline import Recording

        y = torch.randn(1 << 20, device="cuda")
        torch.cuda.synchronize()
        with Recording() as rec:
            why = _native.cupti_start()
            s0 = _native.cupti_stats()
            F.silu(y)
            torch.cuda.synchronize()
            s1 = _native.cupti_stats()
            if not why:
                _native.cupti_stop()
        spans = [{"name": s.name, "cause": int(s.cause), "value": int(s.value), "ms": s.dur_ns / 1e6}
                 for s in build_spans(rec.drain())]
        return {"why": why, "launches": s1["kernel_launches"] - s0["kernel_launches"],
                "new_kernels": s1["new_kernel_count"] - s0["new_kernel_count"],
                "names": s1["new_kernels"][-4:], "callbacks": s1["callbacks"] - s0["callbacks"],
                "refused": s1["refused_callbacks"], "spans": spans[:40]}
    except Exception as e:
        return {"error": repr(e)[:400]}


ALLOC_CHILD = r"""
import json, torch
from warmprof import _native
from warmprof.attribution import build_spans
from warmprof.timeline import Recording
torch.zeros(1, device='cuda'); torch.cuda.synchronize()
b = torch.cuda.memory_stats()
with Recording() as rec:
    why = _native.cupti_start()
    x = torch.empty(256 << 20, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()
    if not why: _native.cupti_stop()
a = torch.cuda.memory_stats()
keys = ('segment.all.allocated', 'num_device_alloc', 'reserved_bytes.all.allocated', 'reserved_bytes.all.current')
print(json.dumps({'backend': torch.cuda.get_allocator_backend(), 'why': why,
                  'spans': [(s.name, int(s.cause), int(s.value), s.dur_ns / 1e6) for s in build_spans(rec.drain()) if s.cause],
                  'stats_delta': {k: (a.get(k, 0) or 0) - (b.get(k, 0) or 0) for k in keys}}))
"""


def main() -> int:
    try:
        lib = ctypes.CDLL(maps[0] if maps else "libcupti.so.13")
    except OSError as e:
        result["subscribe"] = {"api": "none", "result": -1, "text": f"libcupti not loadable: {e}", "holder": ""}
        lib = None
    if lib is not None:
        raw_steps(lib)
    result["warmprof_fresh"] = child(WARMPROF_FRESH, 40)
    save(OUT, result)
    result["warmprof_silu"] = warmprof_here()
    save(OUT, result)
    allocs: dict = {}
    for conf in ("", "expandable_segments:True", "backend:cudaMallocAsync"):
        allocs[conf or "native"] = child(ALLOC_CHILD, 30, env=dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf))
        result["allocators"] = allocs
        save(OUT, result)
    steps = result.get("steps", {})
    print(json.dumps({k: {"ms": round(v["ms"], 3), "callbacks": v["callbacks"]} for k, v in steps.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
