"""The bundled Fuxi-style scheduler (DESIGN.md §6)."""
