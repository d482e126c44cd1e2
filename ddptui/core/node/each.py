"""Provides `each`: a node helper verb run by a Slurm step with a task per node, each task
with its own node's arguments, and MARK, the line a task of such a step names itself with.

Sent ahead of job_helper.py, and of the reap step's program (`reap_step_source()`: the GPU
sampler, the reaper and this file, without the rest of the helper, as every node compiles
it while teardown waits). Standard library only.
"""

from __future__ import annotations

import base64
import json
import os
import sys

MARK = b"\x1eddptui-step "  # a task's marks (`node NAME`, `exit CODE`): step_task.sh's ddptui_mark


def each(job_text: str, verbs: dict, verb: str) -> int:
    """A task of a step on every node: `verb` with this node's arguments from the table
    (JOB: {"nodes": {NAME: [ARGS]}}); its JSON report, naming the node, on one line."""
    import contextlib
    import io

    node = os.environ.get("SLURMD_NODENAME", "")
    args = json.loads(base64.b64decode(job_text).decode())["nodes"].get(node)
    if args is None:
        return 1
    if verb == "gpu":  # a stream, not a report: the node's mark first, then its samples
        os.write(1, MARK + f"node {node}\n".encode())
        return int(verbs[verb](*args) or 0)
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        code = verbs[verb](*args)
    report = json.loads(said.getvalue().strip().splitlines()[-1])
    report["node"] = node
    sys.stdout.write(json.dumps(report) + "\n")
    return int(code or 0)
