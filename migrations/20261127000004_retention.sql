-- Retention, per namespace (NULL: forever). A background job drops stored packs older than
-- retain_packs_days, and erases (EraseSubject's path, audited) sessions whose last event is
-- older than retain_events_days.
ALTER TABLE namespaces
    ADD COLUMN retain_packs_days  integer CHECK (retain_packs_days > 0),
    ADD COLUMN retain_events_days integer CHECK (retain_events_days > 0);
