"""External commands on a disk's hot path, started without a ``fork()``.

oslo.concurrency's ``processutils.execute`` always gives ``subprocess`` a
``preexec_fn`` (its ``_subprocess_setup``, which restores SIGPIPE), and
CPython can start a child that runs Python code before ``exec`` only with
``fork()``: it copies nova-compute's page tables, 14-20 ms a command on
these machines (``benchmarks/profile.py``), as long as ``qemu-img create``
itself. Without one CPython ``vfork()``s, and ``restore_signals`` (its
default) sets SIGPIPE and SIGXFSZ back to their defaults in the child, as
``_subprocess_setup`` does.

:func:`execute` is for the few commands run for every disk (an overlay's
``qemu-img create``, a Flat disk's ``cp -r``); everything else goes
through ``processutils`` as stock's do. What a caller sees is
processutils': the same log lines, the same
:class:`~oslo_concurrency.processutils.ProcessExecutionError` with the
command, exit code and output.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from oslo_concurrency import processutils
from oslo_log import log as logging
from oslo_utils import strutils
from oslo_utils import timeutils

LOG = logging.getLogger(__name__)


def execute(*cmd: str,
            env_variables: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Run ``cmd`` and wait for it, as ``processutils.execute(*cmd)`` does.

    :param env_variables: the child's whole environment (as processutils'
        parameter of that name); this process's when None.
    :returns: the command's (stdout, stderr), decoded.
    :raises ProcessExecutionError: it exited with a status other than 0.
    :raises OSError: it could not be started.
    """
    sanitized = strutils.mask_password(' '.join(cmd))
    watch = timeutils.StopWatch()
    watch.start()
    LOG.debug('Running cmd (subprocess): %s', sanitized)
    proc = subprocess.run(  # noqa: S603 (a list, no shell)
        cmd, stdin=subprocess.DEVNULL, capture_output=True, close_fds=True,
        env=None if env_variables is None else dict(env_variables),
        check=False)
    LOG.debug('CMD "%s" returned: %s in %0.3fs', sanitized, proc.returncode,
              watch.elapsed())
    stdout, stderr = os.fsdecode(proc.stdout), os.fsdecode(proc.stderr)
    if proc.returncode != 0:
        raise processutils.ProcessExecutionError(
            exit_code=proc.returncode,
            stdout=strutils.mask_password(stdout),
            stderr=strutils.mask_password(stderr), cmd=sanitized)
    return stdout, stderr
