"""tidesync: keeps ship and shore MySQL databases in sync over weak satellite links.

Subpackages and their import rules: docs/architecture.md.
"""

__version__ = "0.1.0"
