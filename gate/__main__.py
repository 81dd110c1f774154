"""``python -m gate [--keep]``: the whole gate.

Brings the real cloud up (:mod:`gate.cloud`), says what runs, and takes it
down again unless ``--keep`` (then it prints how to use and stop it). The
cloud is taken down on failure and on Ctrl-C/SIGTERM too.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from gate.cloud import __main__ as cloud_cli
from gate.cloud import down as D
from gate.cloud import proc as P


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise cloud_cli.Interrupted(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog='python -m gate', description=__doc__)
    p.add_argument('--keep', action='store_true',
                   help='leave the cloud running at the end')
    args = p.parse_args(argv)
    try:
        state, cloud = cloud_cli.start()
    except P.GateError as e:
        print('gate: %s' % e, file=sys.stderr)
        return 1
    except (KeyboardInterrupt, cloud_cli.Interrupted):
        return 130
    rc = 0
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        cloud_cli.report(state, cloud)
    except (KeyboardInterrupt, cloud_cli.Interrupted):
        rc = 130
        args.keep = False
    finally:
        if args.keep:
            cloud_cli.how_to_use(state)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if D.down(state.layout.base):
                rc = rc or 1
    return rc


if __name__ == '__main__':
    sys.exit(main())
