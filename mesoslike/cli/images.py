"""``mesoslike agent images``: what an agent's image cache holds
(docs/containers.rst, "Images")."""

from __future__ import annotations

import json
import os
import socket
import time

import click

from mesoslike.cli.options import die, option

__all__ = ["images"]


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024   # type: ignore[assignment]
    raise AssertionError("unreachable")


@click.command("images")
@option("agent_images", "--work-dir", type=click.Path(file_okay=False), default=None,
        show_default="<tmp>/mesoslike-<uid>/agent-<hostname>", help="The agent's work dir (its cache is <work-dir>/images).")
@option("agent_images", "--hostname", default=None, show_default="this machine's name",
        help="The agent's name, for the default work dir.")
@option("agent_images", "--json", "as_json", is_flag=True, default=False, show_default="off",
        help="One JSON document instead of a table.")
def images(work_dir: str | None, hostname: str | None, as_json: bool) -> None:
    """List the images of an agent's cache on this machine: their layers'
    size on disk, when each was last used, and the tasks holding them
    (leases). Reads the cache's index; safe while the agent runs."""
    from mesoslike.agent.images import IMAGES_DIR, ImageError, ImageStore
    from mesoslike.agent.runtime import default_work_dir

    root = os.path.join(work_dir or default_work_dir(hostname or socket.gethostname()), IMAGES_DIR)
    if not os.path.isdir(root):
        die(f"no image cache in {root} (no agent with images has run on that work dir)")
    try:
        store = ImageStore(root)
        cached, usage = store.images(), store.usage()
    except (ImageError, OSError) as exc:
        die(f"cannot read the image cache {root}: {exc}")
    if as_json:
        click.echo(json.dumps({"cache": root, "bytes": usage, "images": [
            {"name": image.name, "manifest": image.manifest, "layers": list(image.layers), "bytes": image.size,
             "used": image.used, "leases": list(image.leases)} for image in cached]}, indent=2))
        return
    click.echo(f"{root}: {len(cached)} image(s), layers {_size(usage)}")
    for image in cached:
        used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(image.used))
        held = f"held by {', '.join(image.leases)}" if image.leases else "not in use"
        click.echo(f"  {image.name}  {image.manifest[:19]}  {len(image.layers)} layer(s)  {_size(image.size)}  "
                   f"last used {used}  {held}")
