"""Read models built from the shore event streams, the projection engine and rebuilds.

Views (PostgreSQL tables, created by tidesync/migrations/postgres/0020_views.sql): receipts,
record_head, conflict_center, node_overview, backlog (+ backlog_event, backlog_job), audit
(audit_event).
`shore work` keeps every registered view current; each batch of notifications is written with
its position in projection_tracking in one transaction. Batch size and refresh
interval come from `[projections]`, the conflict SLA from `conflicts.manual_sla_hours`
(`tidesync.bootstrap.shore.view_settings`).

Functions other components call (all take open applications, see
`catalogue.default_catalogue().open_applications(env)`, and a psycopg pool where they touch
view tables):

* `views.list_views()`, `views.view_status(apps, pool, name=None)`: what there is, position,
  head, events behind, rate.
* `rebuild.rebuild_view(name, apps=, pool=, actor=, reason=)`: side-by-side rebuild, switched in
  atomically, recorded as an OperatorAction.
* `history.aggregate_events / state_at / diff_versions / aggregate_at(apps, kind, id, ...)`:
  auditor replay of any aggregate, values that may be business data shown as digests.
"""
