"""Writing never replaces what is not a regular file (warmprof.system.fileio's policy), and a failed write
leaves the old file whole. Every device node, FIFO and socket here is made in tmp_path: the
system's /dev is never touched."""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import stat
import threading

import pytest

from factories import trace_report
from warmprof.cli import main
from warmprof.system.output_paths import check_output_path
from warmprof.errors import InputError, ReportError
from warmprof.system.fileio import stream_fd, write_output
from warmprof.render.base import Renderer
from warmprof.render.json import JsonRenderer


def mknod(path, kind=stat.S_IFCHR, major=1, minor=3):
    try:
        os.mknod(path, kind | 0o666, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD)")
    return path


@pytest.fixture
def null_dev(tmp_path):
    return mknod(tmp_path / "null")


@pytest.fixture
def full_dev(tmp_path):
    return mknod(tmp_path / "full", minor=7)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def kind_of(path) -> int:
    return stat.S_IFMT(os.lstat(path).st_mode)


def read_through_fifo(path, write) -> bytes:
    """Hold the FIFO's read end open, run write() in a thread, and return what came through."""
    rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a reader is present before the writer opens
    errors: list[BaseException] = []

    def writer():
        try:
            write()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            errors.append(e)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    got = bytearray()
    try:
        while True:
            ready, _, _ = select.select([rfd], [], [], 10)
            assert ready, "the writer stalled"
            try:
                chunk = os.read(rfd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk and not t.is_alive():
                break
            got += chunk
            if not chunk:
                t.join(0.05)
    finally:
        os.close(rfd)
    t.join(10)
    if errors:
        raise errors[0]
    return bytes(got)


# -- regular files and new names: atomic ----------------------------------------------------------
def test_a_regular_file_is_replaced_atomically_keeping_its_mode(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    report = trace_report({"jit_compile": 3.0})
    report.save(target)
    assert json.loads(target.read_text()) == json.loads(report.to_json())
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert os.listdir(tmp_path) == ["r.json"]  # no temporary file left


def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path):
    old = os.umask(0o027)
    try:
        path = write_output(tmp_path / "new.txt", "hello\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640 and path.read_text() == "hello\n"


def test_a_write_that_fails_leaves_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text("the old report\n")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ReportError, match="cannot write .No space left on device"):
        trace_report({"jit_compile": 3.0}).save(target)
    assert target.read_text() == "the old report\n" and os.listdir(tmp_path) == ["r.json"]


def test_a_render_that_fails_leaves_the_old_file_whole(tmp_path):
    class Broken(Renderer):
        def render(self, report):
            raise ValueError("drawing failed")

    target = tmp_path / "out.json"
    target.write_text("the old rendering\n")
    with pytest.raises(ValueError):
        Broken().write(trace_report({"jit_compile": 3.0}), target)
    assert target.read_text() == "the old rendering\n" and os.listdir(tmp_path) == ["out.json"]


# -- symbolic links: followed --------------------------------------------------------------------
def test_a_symlink_stays_a_link_and_its_target_is_replaced(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    trace_report({"jit_compile": 3.0}).save(link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads(real.read_text())["kind"] == "trace"


def test_a_dangling_symlink_is_refused(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "typo" / "r.json")
    with pytest.raises(ReportError, match="a symbolic link to .*typo/r.json, which does not exist"):
        trace_report({"jit_compile": 3.0}).save(link)
    assert link.is_symlink() and not (tmp_path / "typo").exists()


# -- devices, FIFOs and streams: written in place ------------------------------------------------
def test_a_null_device_stays_a_device(null_dev):
    trace_report({"jit_compile": 3.0}).save(null_dev)
    assert kind_of(null_dev) == stat.S_IFCHR  # not renamed over by a regular file


def test_a_terminal_is_written_in_place_without_root(tmp_path):
    """A pseudo-terminal is a character device any user can make: the report reaches the reader
    end and the node is never renamed over (the mknod cases above need root)."""
    reader, writer = os.openpty()
    try:
        node = os.ttyname(writer)
        link = tmp_path / "tty"  # through a symlink, as a user might name it
        link.symlink_to(node)
        path = trace_report({"jit_compile": 3.0}).save(link)
        got = b""
        while b"schema_version" not in got or not got.rstrip().endswith(b"}"):
            ready, _, _ = select.select([reader], [], [], 30)
            assert ready, "the report never reached the terminal"
            got += os.read(reader, 1 << 16)
        assert kind_of(node) == stat.S_IFCHR and link.is_symlink() and path == link
    finally:
        os.close(reader)
        os.close(writer)


def test_a_full_device_gives_its_enospc_and_stays_a_device(full_dev):
    with pytest.raises(ReportError, match=f"{full_dev}: cannot write .No space left on device") as info:
        trace_report({"jit_compile": 3.0}).save(full_dev)
    assert isinstance(info.value.__cause__, OSError) and kind_of(full_dev) == stat.S_IFCHR


def test_a_fifo_without_a_reader_is_a_clear_error_not_a_wait(fifo):
    with pytest.raises(ReportError, match="no process is reading the FIFO"):
        write_output(fifo, "x")
    assert kind_of(fifo) == stat.S_IFIFO


def test_a_fifo_with_a_reader_gets_everything_even_past_the_pipe_buffer(fifo):
    data = b"0123456789abcdef" * 20000  # 320 KB: the write must block, not fail, once the pipe is full
    assert read_through_fifo(fifo, lambda: write_output(fifo, data)) == data
    report = trace_report({"jit_compile": 3.0})
    assert read_through_fifo(fifo, lambda: report.save(fifo)).decode() == report.to_json() + "\n"
    assert kind_of(fifo) == stat.S_IFIFO


@pytest.mark.parametrize("name", ["/dev/fd/{}", "/proc/self/fd/{}"])
def test_a_descriptor_path_is_written_to_that_descriptor(name):
    r, w = os.pipe()
    try:
        write_output(name.format(w), "through the pipe\n")
        assert os.read(r, 100) == b"through the pipe\n"
    finally:
        os.close(r)
        os.close(w)


def test_stream_names_are_recognised_before_any_link_is_followed():
    assert [stream_fd(p) for p in ("/dev/stdout", "/dev/stderr", "/dev/fd/7", "/proc/self/fd/9", "/dev/./stdout")] == [1, 2, 7, 9, 1]
    assert stream_fd("/tmp/dev/stdout") is None and stream_fd("/dev/stdout2") is None and stream_fd("") is None


# -- refused ---------------------------------------------------------------------------------------
def test_a_directory_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    with pytest.raises(ReportError, match="a directory, not a file"):
        write_output(folder, "x")
    assert folder.is_dir()


def test_a_block_device_is_refused_without_being_opened(tmp_path):
    node = mknod(tmp_path / "blk", stat.S_IFBLK, 7, 200)
    with pytest.raises(ReportError, match="a block device, not a file"):
        write_output(node, "x")
    assert kind_of(node) == stat.S_IFBLK


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(ReportError, match="a socket, not a file"):
            write_output(path, "x")
        assert kind_of(path) == stat.S_IFSOCK


# -- check_output_path: the same classification, before any work ----------------------------------
def test_the_up_front_check_accepts_what_is_written_in_place(null_dev, fifo):
    for path in (null_dev, fifo, "/dev/stdout", "/dev/fd/1"):
        check_output_path(str(path))


def test_the_up_front_check_refuses_what_the_writer_refuses(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere.json")
    blk = mknod(tmp_path / "blk", stat.S_IFBLK, 7, 200)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "s"))
        for path, message in ((folder, "is a directory"), (dangling, "which does not exist"),
                              (blk, "a block device"), (tmp_path / "s", "a socket")):
            with pytest.raises(InputError, match=message):
                check_output_path(str(path), "-o")


# -- through the commands: show -o and compare --json on each kind -------------------------------
@pytest.fixture
def targets(tmp_path):
    """name -> (path, what should happen: None = written, else a fragment of the one-line error)."""
    made = {"null": (mknod(tmp_path / "null"), None), "full": (mknod(tmp_path / "full", minor=7), "No space left on device")}
    os.mkfifo(tmp_path / "fifo")
    made["fifo, no reader"] = (tmp_path / "fifo", "no process is reading the FIFO")
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    made["symlink"] = (tmp_path / "link.txt", None)
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "nowhere.txt")
    made["dangling"] = (tmp_path / "dangling.txt", "which does not exist")
    (tmp_path / "d").mkdir()
    made["directory"] = (tmp_path / "d", "is a directory")
    return made


KINDS = ["null", "full", "fifo, no reader", "symlink", "dangling", "directory"]


def _check_outcome(path, expected, code, err):
    before = {"null": stat.S_IFCHR, "full": stat.S_IFCHR, "fifo": stat.S_IFIFO, "link.txt": stat.S_IFLNK,
              "dangling.txt": stat.S_IFLNK, "d": stat.S_IFDIR}[path.name]
    assert kind_of(path) == before  # whatever happened, the node is what it was
    if expected is None:
        assert code == 0
    else:
        assert code != 0 and err.startswith("warmprof: error: ") and err.count("\n") == 1 and expected in err


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("kind", KINDS)
def test_show_output_on_each_kind_of_path(tmp_path, targets, capsys, kind, fmt):
    report = trace_report({"jit_compile": 3.0}).save(tmp_path / "r.json")
    path, expected = targets[kind]
    code = main(["show", str(report), "--format", fmt, "-o", str(path)])
    _check_outcome(path, expected, code, capsys.readouterr().err)
    if kind == "symlink":
        assert "jit_compile" in (tmp_path / "real.txt").read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_compare_json_on_each_kind_of_path(tmp_path, targets, capsys, kind):
    a = trace_report({"jit_compile": 3.0}).save(tmp_path / "a.json")
    b = trace_report({"jit_compile": 9.0}).save(tmp_path / "b.json")
    path, expected = targets[kind]
    code = main(["compare", str(a), str(b), "--json", str(path)])
    _check_outcome(path, expected, code, capsys.readouterr().err)
    if kind == "symlink":
        assert json.loads((tmp_path / "real.txt").read_text())["kind"] == "comparison"


def test_a_json_renderer_writes_through_the_same_policy(null_dev):
    JsonRenderer().write(trace_report({"jit_compile": 3.0}), null_dev)
    assert kind_of(null_dev) == stat.S_IFCHR


def test_a_symlink_to_dev_stdout_is_a_stream_not_the_file_stdout_goes_to(tmp_path):
    """`ln -s /dev/stdout out; --json out > f`: resolving the link whole lands on f, which a rename
    would replace under the shell's redirect; followed hop by hop it is fd 1, written in place."""
    import subprocess
    import sys

    link = tmp_path / "out"
    link.symlink_to("/dev/stdout")
    redirected = tmp_path / "printed.txt"
    code = ("import sys; from warmprof.system.fileio import write_output; print('before', flush=True); "
            f"write_output({str(link)!r}, 'report\\n'); print('after', flush=True)")
    with open(redirected, "w") as f:
        subprocess.run([sys.executable, "-c", code], stdout=f, check=True, timeout=120)
    assert redirected.read_text() == "before\nreport\nafter\n"
    assert link.is_symlink()


@pytest.mark.parametrize("path, message", [("out/", "is a directory"), ("-", "give a file name")])
def test_a_folder_name_or_a_dash_is_refused_up_front(tmp_path, monkeypatch, path, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=message):
        check_output_path(path)
    assert list(tmp_path.iterdir()) == []


def test_a_name_of_255_bytes_gets_a_temporary_name_that_fits(tmp_path):
    target = tmp_path / ("r" * 250 + ".json")
    write_output(target, "{}")
    assert target.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_a_name_of_254_utf8_bytes_is_written_and_one_past_the_limit_is_refused_up_front(tmp_path):
    """Issue 26: the temporary name was cut by characters (a 254-byte name of 2-byte characters gave a
    temporary name past 255 bytes, refused after the whole trace); a name too long in bytes is refused
    by the up-front check, before any work."""
    legal = tmp_path / ("é" * 122 + ".json")  # 244 + 5 = 249 bytes, 127 characters
    assert len(os.fsencode(legal.name)) <= 255
    check_output_path(str(legal))
    write_output(legal, "{}")
    assert legal.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == [legal.name]
    long = tmp_path / ("é" * 126 + ".json")  # 257 bytes, 131 characters
    with pytest.raises(InputError, match=r"the file name is 257 bytes long; this file system takes at most 255"):
        check_output_path(str(long))
    assert main(["show", str(legal), "-o", str(long)]) != 0


# ---- another user's link in a shared sticky folder (issue 26): never followed ------------------------

NOBODY = 65534


@pytest.fixture
def shared(tmp_path):
    """A /tmp-like folder (sticky, world-writable, owned by root) and a root-only 0600 file in a 0700
    folder: what another user's link would aim a root process's write at."""
    if os.geteuid() != 0:
        pytest.skip("a link owned by another user needs root to make (lchown)")
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "secret"
    secret.write_bytes(b"root only\n")
    os.chmod(secret, 0o600)
    return folder, secret


def planted(link, target, uid=NOBODY):
    link.symlink_to(target)
    os.lchown(link, uid, uid)
    return link


def test_another_users_link_in_a_sticky_folder_is_not_followed(shared):
    folder, secret = shared
    link = planted(folder / "report.json", secret)
    with pytest.raises(ReportError, match=r"report.json is a symbolic link in the shared sticky folder .*another user "
                                          r"\(uid 65534\): not followed"):
        write_output(link, "{}")
    assert secret.read_bytes() == b"root only\n" and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert link.is_symlink() and sorted(p.name for p in folder.iterdir()) == ["report.json"]  # no temp file left
    with pytest.raises(InputError, match="not followed"):  # refused before any work, too
        check_output_path(str(link))


def test_another_users_link_to_a_folder_on_the_way_is_not_followed(shared):
    folder, secret = shared
    planted(folder / "out", secret.parent)
    with pytest.raises(ReportError, match="not followed"):
        write_output(folder / "out" / "secret", "{}")
    assert secret.read_bytes() == b"root only\n"


def test_a_cli_report_write_through_a_planted_link_is_refused(shared, capsys):
    folder, secret = shared
    link = planted(folder / "report.json", secret)
    src = trace_report({"jit_compile": 3.0}).save(folder.parent / "r.json")
    code = main(["show", str(src), "--format", "json", "-o", str(link)])
    err = capsys.readouterr().err
    assert code != 0 and err.startswith("warmprof: error: ") and err.count("\n") == 1 and "not followed" in err
    assert secret.read_bytes() == b"root only\n"


def test_own_links_and_the_folder_owners_links_in_a_sticky_folder_are_followed(shared, tmp_path):
    folder, _ = shared
    mine = tmp_path / "mine.json"
    mine.write_text("old")
    planted(folder / "a.json", mine, uid=os.geteuid())  # this user's own link
    write_output(folder / "a.json", "new")
    assert mine.read_text() == "new"
    os.chown(folder, NOBODY, NOBODY)  # the folder's owner's link: the kernel follows it too
    planted(folder / "b.json", mine)
    write_output(folder / "b.json", "newer")
    assert mine.read_text() == "newer" and (folder / "b.json").is_symlink()


def test_a_file_swapped_for_a_link_while_being_written_is_refused(tmp_path, monkeypatch):
    """The check is made on what is opened: a name that stops being the file checked (here a link
    put in its place after the check, before the rename) is refused and the link's target is kept."""
    from warmprof.system import fileio

    target, other = tmp_path / "r.json", tmp_path / "other"
    target.write_text("old")
    other.write_text("keep")
    real_new_temp = fileio._new_temp

    def swap_then_temp(dfd, name):
        target.unlink()
        target.symlink_to(other)
        return real_new_temp(dfd, name)

    monkeypatch.setattr(fileio, "_new_temp", swap_then_temp)
    with pytest.raises(ReportError, match="replaced by something else while being written"):
        write_output(target, "new")
    assert other.read_text() == "keep" and target.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "r.json"]
