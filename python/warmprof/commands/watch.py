"""warmprof watch --demo: the TTFT-outlier story end to end, on the compiled demo LM."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..system.output_paths import check_output_path, save_and_print

NAME = "watch"
HELP = ("Replay a stream of requests through the compiled demo LM under warmprof.watch: each outlier and "
        "its cause as it comes, then the summary.")


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--demo", action="store_true", help="the built-in stream through the compiled demo LM")
    parser.add_argument("--requests", type=int, default=200, metavar="N", help="requests in the stream (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="the stream's seed")
    parser.add_argument("--idle-at", type=int, default=150, metavar="I",
                        help="a 1.5 s quiet spell before request I (default 150; -1 for none)")
    parser.add_argument("--json", metavar="PATH", help="also save the watch report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no line per event while the stream runs")


def run(args: argparse.Namespace) -> int:
    if not args.demo:
        raise InputError("warmprof watch replays the demo stream (--demo); in a service, call warmprof.watch(model) "
                         "and serve through what it returns (docs/watch.md)")
    if not 12 <= args.requests <= 100000:
        raise InputError("--requests must be from 12 (one per length) to 100000")
    if args.json is not None:
        check_output_path(args.json)
    from ..render.watch_text import event_line
    from ..serving.watch import watch
    from ..serving.watch.demo import compiled_demo, own_compile_cache, replay, stream
    from ..system.supervise import Terminated, sigterm_raises

    lengths = stream(args.requests, seed=args.seed)
    say = (lambda e: None) if args.quiet else (lambda e: print(event_line(e), file=sys.stderr, flush=True))
    if not args.quiet:
        print(f"warmprof watch: {len(lengths)} requests over {len(set(lengths))} prompt lengths through the compiled "
              "demo LM (static shapes: each new length compiles, a few seconds each here)", file=sys.stderr)
    try:
        # torch.compile's caches in a folder of the demo's own, removed however the stream ends (Ctrl-C,
        # SIGTERM, an error): inductor's default one in TMPDIR would outlive the demo (about 160 MB)
        with sigterm_raises(), own_compile_cache():
            model = compiled_demo()
            with watch(model, label="demo LM (compiled, static shapes)", on_event=say) as w:
                replay(w, lengths, idle_at=args.idle_at if args.idle_at >= 0 else None)
    except Terminated as t:
        print("warmprof: terminated", file=sys.stderr)
        return 128 + t.signum
    return save_and_print(w.report(), args.json)
