"""Deploy each target's flows to its own work pool:
    python flows/deploy.py deploy=fleet targets=[fpga,asic] [other overrides]

For every target (default: reprofile.targets) a process work pool named after it
(deploy.work_pool) is created if missing, and the onboard, reprofile and verify flows are deployed
to it as onboard/<target>, reprofile/<target> (on the reprofile.cron schedule) and verify/<target>
(adapt runs it with deploy.remote_verify=true). A worker
on the host that has the device (`prefect worker start --pool <target>`) runs them. The other
overrides travel with the deployments: the worker composes the same config. Last stdout line:
`deployed: <names>`."""
from __future__ import annotations

import sys

from app.environment import quiet_prefect

quiet_prefect()  # before prefect is imported: it sets up logging at import time

from app.cli import run_cli  # noqa: E402
from app.fleet import deploy_target, ensure_pools, require_server  # noqa: E402


def main(argv: list[str]) -> int:
    def body(s, raw) -> str:
        require_server(s)
        targets = s.targets or s.reprofile.targets
        created = ensure_pools([s.deploy.pool(t) for t in targets])
        if created:
            print(f"[meta-infer] created work pools: {', '.join(created)}", file=sys.stderr)
        names = [name for t in targets for name in deploy_target(s, t, argv)]
        return f"deployed: {', '.join(names)}"

    return run_cli(argv, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
