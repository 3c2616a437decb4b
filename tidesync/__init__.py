"""tidesync: keeps ship and shore MySQL databases in sync over weak satellite links.

Subpackages follow DESIGN.md §2: domain, wire, ship, ingress, shore, projections, graphql.
"""

__version__ = "0.1.0"
