"""Inside a container: which of the project's output folders live only in the container's own filesystem.

`docker run --rm visbench-harness …` without `-v` mounts writes its records, corpus and pages into the
container's writable layer, and they are gone when the container is removed. The run itself cannot tell that it
is being thrown away, so the CLI says so before any work starts and names the mounts that keep the outputs
(docs/docker.md). Outside a container, or when the folder (or a folder above it, such as the whole
checkout mounted at the project root) is a mount point, nothing is reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

# /.dockerenv is Docker's marker, /run/.containerenv podman's (both create it in every container)
CONTAINER_MARKERS = (Path("/.dockerenv"), Path("/run/.containerenv"))
MOUNTINFO = Path("/proc/self/mountinfo")
CONTAINER_LAYERS = ("overlay", "fuse.fuse-overlayfs", "aufs")  # root filesystems that are an image's layers
APP_DIR = "/workspace/visbench-harness"  # the image's WORKDIR (Dockerfile): where docs/docker.md's mounts point


def in_container(markers: Iterable[Path] = CONTAINER_MARKERS) -> bool:
    return any(marker.exists() for marker in markers)


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in paths as 3-digit octal escapes (proc(5))
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mounts(mountinfo: Path = MOUNTINFO) -> dict[Path, tuple[str, str]]:
    """Mount point -> (filesystem type, the directory of that filesystem mounted there), as this process sees
    them (proc(5): the fifth and fourth fields, and the first after the " - " separator); a later mount over the
    same point wins, as it does for the path."""
    table = {}
    for line in mountinfo.read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split(" ")
        if len(fields) > 4 and after:
            table[Path(_unescape(fields[4]))] = (after.split(" ")[0], _unescape(fields[3]))
    return table


def unmounted(folders: Iterable[str], mountinfo: Path = MOUNTINFO) -> list[str]:
    """The folders that lie in the container's own root filesystem: no mount point at or above them but the
    root, and the root an image's layers: an overlay (Docker's and podman's default storage) or a directory of
    the host's disk (podman's vfs storage). A VM or a machine built from an image that merely left a /.dockerenv
    behind has an ordinary root filesystem, mounted whole. An unreadable mountinfo reports nothing: a warning
    that cannot be checked is not given."""
    try:
        table = mounts(mountinfo)
    except OSError:
        return []
    fstype, source = table.get(Path("/"), ("", "/"))
    if fstype not in CONTAINER_LAYERS and source == "/":
        return []
    points = [point for point in table if point != Path("/")]
    lost = []
    for folder in folders:
        path = Path(folder).resolve()
        if not any(path == point or point in path.parents for point in points):
            lost.append(folder)
    return lost


def unmounted_outputs_warning(folders: list[str], dry_run: bool) -> str | None:
    """The one-line warning for a run inside a container whose output folders are not mounted, else None."""
    if not in_container():
        return None
    lost = unmounted(folders)
    if not lost:
        return None
    options = " ".join(f'-v "$PWD/{folder}:{APP_DIR}/{folder}"' for folder in lost)
    verb = "would stay" if dry_run else "stays"
    return (f"inside a container, {', '.join(f'{f}/' for f in lost)} {'is' if len(lost) == 1 else 'are'} not "
            f"mounted from the host: what this run writes there {verb} in the container and is gone with it; "
            f"to keep it, mkdir those folders and add {options} (docs/docker.md)")
