"""The bundled Fuxi-style scheduler (docs/fuxi.rst, docs/fuxi-scheduling.rst)."""
