"""Console API: the strawberry GraphQL schema, one folder per area.

Served by the shore Starlette app at /graphql.
"""
