-- Orders written by the gateway's example tools create_order, get_order and find_orders
-- (docs/semantics.md §9). Shared by all replicas, so the quickstart's effects are real.
--
-- Not a product migration: the gateway runs this file when it starts with the example tools
-- and carmy.example_orders does not exist yet (orders::PostgresOrderBook::prepare), under the
-- migration lock. Databases migrated by earlier builds got the same table from migration
-- V2__example_orders (now retired) and keep it.

CREATE TABLE IF NOT EXISTS carmy.example_orders (
    order_id   bigserial   PRIMARY KEY,
    principal  text        NOT NULL,
    sku        text        NOT NULL,
    quantity   bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS example_orders_principal_sku_idx
    ON carmy.example_orders (principal, sku);

COMMENT ON TABLE carmy.example_orders IS
    'Orders created by the example tool create_order (one row per tool run that created one) and '
    'read by get_order and find_orders. Demonstration data: a retried create_order that replays '
    'from carmy.reservations adds no row, which find_orders lets a user reconcile. Created by the '
    'gateway''s example tools, not by the product''s migrations; dropping it is safe when they '
    'are not used.';
COMMENT ON COLUMN carmy.example_orders.order_id IS
    'The order''s id, returned by create_order as {"order_id": ...}.';
COMMENT ON COLUMN carmy.example_orders.principal IS
    'The principal whose call created the order; each principal sees only its own orders.';
COMMENT ON COLUMN carmy.example_orders.sku IS 'The ordered stock-keeping unit, as given.';
COMMENT ON COLUMN carmy.example_orders.quantity IS 'How many units were ordered.';
COMMENT ON COLUMN carmy.example_orders.created_at IS 'When the order was created (database clock).';
COMMENT ON INDEX carmy.example_orders_principal_sku_idx IS
    'Serves find_orders: one principal''s orders, optionally of one sku.';
