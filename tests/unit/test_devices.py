"""The device table (warmprof/devices.py): its entries, parsing with DeviceError's wording, sync of
the given device (fake torch.cuda / torch.mps: no GPU needed), and no device branch elsewhere."""

from __future__ import annotations

import pathlib
import re

import pytest

from warmprof import devices
from warmprof.errors import DeviceError

torch = pytest.importorskip("torch")

PACKAGE = pathlib.Path(devices.__file__).parent


# -- the entries -----------------------------------------------------------------------------------

def test_the_table_holds_cpu_cuda_and_mps_in_that_order():
    assert devices.NAMES == ("cpu", "cuda", "mps")
    assert [k.name for k in devices.KINDS.values()] == list(devices.NAMES)
    assert devices.HOST is devices.KINDS["cpu"]
    assert [k.name for k in devices.KINDS.values() if k.host] == ["cpu"]


@pytest.mark.parametrize("name, backends, sync_how, label", [
    ("cpu", ("eager", "compile"), "none needed (cpu)", "CPU"),
    ("cuda", ("eager", "compile", "cupy"), "device synchronize around every timed call", "CUDA"),
    ("mps", ("eager",), "torch.mps.synchronize() around every timed call", "MPS"),
])
def test_each_kind_says_where_its_probes_run_and_how_they_sync(name, backends, sync_how, label):
    kind = devices.KINDS[name]
    assert kind.probe_backends == backends and kind.sync_how == sync_how and kind.label == label


def test_the_probe_backends_devices_are_derived_from_the_table():
    from warmprof.probes.backends import BACKEND_DEVICES

    assert BACKEND_DEVICES == {"eager": ("cpu", "cuda", "mps"), "compile": ("cpu", "cuda"), "cupy": ("cuda",)}


def test_every_name_in_the_table_resolves_to_what_its_layer_calls():
    from warmprof.instruments.device_set import resolve

    for kind in devices.KINDS.values():
        assert callable(resolve(kind.instruments)), kind.name
        if kind.op_probe_instrument is not None:
            assert callable(resolve(kind.op_probe_instrument)), kind.op_probe_instrument
        if kind.probe_reference is not None:  # named in the table, run by the probes
            from warmprof.probes.api import REFERENCES

            assert callable(REFERENCES[kind.probe_reference]), kind.probe_reference
    assert devices.KINDS["cpu"].op_probe_instrument.endswith(":OneDNN")
    assert devices.KINDS["mps"].probe_reference == "metal"
    for kind in devices.KINDS.values():  # issue 25: the set-up's instruments, the libraries' settings, the note
        for name in (kind.setup_instruments, kind.library_settings, kind.eager_shape_note):
            if name is not None:
                assert callable(resolve(name)), name
    assert [k.cuda_graphs for k in devices.KINDS.values()] == [False, True, False]


def test_the_cpu_kind_runs_onednn_and_nothing_of_cuda():
    from warmprof.traces.passes import instruments

    names = [i.name for i in instruments(torch.nn.Linear(2, 2), torch.device("cpu"), compiled=False)]
    assert "onednn" in names and not any(n.startswith(("cupti", "cuda", "mps")) for n in names)


def test_a_kinds_words_in_causes_and_advice():
    from warmprof.probes.aten_verdict import compile_cause

    assert compile_cause("aten.addmm.default", "cpu") == "jit_compile"
    assert compile_cause("aten.mm.default", "mps") == "algorithm_selection"
    assert compile_cause("aten.addmm.default", "cuda") == "runtime_init"  # a lazily loaded kernel: no benchmarking
    assert compile_cause("aten.addmm.default", "cuda", {"tunableop": True}) == "algorithm_selection"
    assert compile_cause("aten.gelu.default", "cuda") == "jit_compile"
    assert [k.advice_column for k in devices.KINDS.values()] == [None, "cuda_advice", None]
    assert [k.fold_op_probes for k in devices.KINDS.values()] == [True, False, False]


def test_kinds_are_found_from_devices_and_from_report_strings():
    assert devices.find("cuda:1") is devices.find(torch.device("cuda", 1)) is devices.KINDS["cuda"]
    assert devices.find("mps") is devices.KINDS["mps"] and devices.find("cpu:0") is devices.HOST
    assert devices.find("xpu") is None and devices.find("") is None and devices.find(None) is None
    with pytest.raises(DeviceError, match=r"^unknown device 'xpu': use cpu, cuda, cuda:N or mps$"):
        devices.of("xpu")


def test_only_cuda_reads_reserved_bytes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 4 << 20)
    assert devices.KINDS["cuda"].reserved_bytes(torch.device("cuda:0")) == 4 << 20
    assert devices.HOST.reserved_bytes(torch.device("cpu")) is None
    assert devices.KINDS["mps"].reserved_bytes(torch.device("mps")) is None


def test_a_fresh_cpu_allocation_is_timed_natively():
    assert devices.HOST.fresh_allocation_ms(torch.device("cpu"), 1 << 20, 3) > 0
    assert "mmap" in devices.HOST.fresh_allocation_how


# -- parsing: the same DeviceError wording as before the table -------------------------------------

def test_the_spellings_messages_join():
    assert devices.USE == "cpu, cuda, cuda:N or mps"
    assert devices.EXAMPLES == "'cpu', 'cuda', 'cuda:1' or 'mps'"


@pytest.mark.parametrize("given", ["gpu", "cuda:-1", "cuda:x", "cuda:1:2", "CUDA", " cuda", "", None, 3.5])
def test_a_device_torch_cannot_read_is_unknown(given):
    with pytest.raises(DeviceError) as info:
        devices.parse(given)
    assert str(info.value) == f"unknown device {given!r}: use cpu, cuda, cuda:N or mps"


def test_a_device_torch_reads_but_warmprof_has_no_entry_for_is_not_supported():
    with pytest.raises(DeviceError, match=r"^device type 'meta' is not supported: use cpu, cuda, cuda:N or mps$"):
        devices.parse("meta")


def test_the_cpu_parses_as_given():
    assert devices.parse("cpu") == torch.device("cpu")
    assert devices.parse(torch.device("cpu")) == torch.device("cpu")


def test_cuda_without_cuda_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match=r"^device 'cuda:0' requested but torch.cuda.is_available\(\) is False"):
        devices.parse("cuda:0")


def test_a_cuda_index_past_the_devices_names_the_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert devices.parse("cuda:1") == torch.device("cuda", 1)
    assert devices.parse("cuda") == torch.device("cuda")
    with pytest.raises(DeviceError, match=r"^device 'cuda:2' requested but only 2 CUDA device\(s\) exist$"):
        devices.parse("cuda:2")


def test_mps_without_mps_says_so(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(DeviceError, match=r"^device 'mps' requested but torch.backends.mps.is_available\(\) is False$"):
        devices.parse("mps")


def test_parse_device_is_the_tables_parse():
    from warmprof.traces.inputs import parse_device

    with pytest.raises(DeviceError, match="^unknown device 'tpu'"):
        parse_device("tpu")


# -- sync: the given device, one function per kind -------------------------------------------------

@pytest.fixture
def synced(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append(("mps", None)))
    return calls


def test_cuda_syncs_the_given_device_not_the_current_one(synced):
    dev = torch.device("cuda:1")
    devices.sync(dev)()
    assert synced == [("cuda", dev)]


def test_mps_syncs_its_device_and_the_cpu_syncs_nothing(synced):
    devices.sync(torch.device("mps"))()
    assert devices.sync(torch.device("cpu"))() is None
    assert synced == [("mps", None)]


def test_every_sync_site_syncs_the_given_device(synced):
    from warmprof.probes.backends import TorchEager
    from warmprof.serving.warmup import _sync

    dev = torch.device("cuda:1")
    _sync(dev)()
    TorchEager(dev, torch.float32).sync()
    assert synced == [("cuda", dev)] * 2


def test_the_warm_run_syncs_the_device_it_ran_on(synced, monkeypatch):
    from warmprof.traces import warm_process

    monkeypatch.setattr(warm_process.devices, "KINDS", {**devices.KINDS, "cpu": _with(devices.HOST, sync=lambda d: (
        lambda: synced.append(("cpu", d))))})
    warm_process.warm_run(torch, torch.nn.Linear(4, 2), "1,4", None, "cpu")
    assert synced == [("cpu", torch.device("cpu"))]


def _with(kind, **changes):
    import dataclasses

    return dataclasses.replace(kind, **changes)


# -- no device branch outside the table and the device's own instruments -------------------------

ALLOWED = re.compile(r"^(devices\.py|instruments/(cuda[^/]*|mps|torch_cuda|cupy)\.py)$")
BRANCH = re.compile(
    r"\.type\s*(==|!=|\bin\b|\bnot in\b)"  # device.type == "cuda", dev.type in (...)
    r"|device_type\s*(==|!=|\bin\b|\bnot in\b)"  # be.device_type == "cpu"
    r"|(==|!=|\bin\b)\s*\(?\s*[\"'](cpu|cuda|mps)[\"']"  # kind == "cuda", name in ("cpu", "cuda", "mps")
)


def test_no_device_branch_outside_the_device_table():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if ALLOWED.match(rel):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if BRANCH.search(code):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "device branches outside devices.py (ask the device table):\n" + "\n".join(found)


def test_the_branch_pattern_catches_each_old_spelling():
    for line in ('if device.type == "cuda":', 'if dev.type != "cpu" and x:', 'be.device_type == "mps"',
                 'if kind == "cuda":', 'not in ("cpu", "cuda", "mps")', "x = dev.type in ('cuda', 'mps')"):
        assert BRANCH.search(line), line
    assert not BRANCH.search('getattr(torch.version, "cuda", None)')
