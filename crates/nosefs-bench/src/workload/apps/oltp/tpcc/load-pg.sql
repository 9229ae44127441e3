-- The initial population on PostgreSQL (psql variables: warehouses, customers, items): every
-- customer has one order; the newest 30% of each district's orders are undelivered (in
-- new_order, with no carrier); ten lines per order.
INSERT INTO warehouse SELECT w, 'w' || w, 0.1, 300000 FROM generate_series(1, :warehouses) w;
INSERT INTO district SELECT w, d, 'd' || d, 0.1, 30000, :customers + 1
  FROM generate_series(1, :warehouses) w, generate_series(1, 10) d;
INSERT INTO customer SELECT w, d, c, 'last' || (c % 1000), 'GC', 0.05, -10, 10, 1, 0, repeat('c', 300)
  FROM generate_series(1, :warehouses) w, generate_series(1, 10) d, generate_series(1, :customers) c;
INSERT INTO item SELECT i, 'item' || i, 1 + i % 100, repeat('i', 40) FROM generate_series(1, :items) i;
INSERT INTO stock SELECT w, i, 50, 0, 0, 0, repeat('s', 24), repeat('s', 40)
  FROM generate_series(1, :warehouses) w, generate_series(1, :items) i;
INSERT INTO orders SELECT w, d, o, o, now(), CASE WHEN o * 10 <= :customers * 7 THEN 1 END, 10
  FROM generate_series(1, :warehouses) w, generate_series(1, 10) d, generate_series(1, :customers) o;
INSERT INTO new_order SELECT o_w_id, o_d_id, o_id FROM orders WHERE o_carrier_id IS NULL;
INSERT INTO order_line SELECT o_w_id, o_d_id, o_id, n, 1 + (o_id * 7 + n * 13) % :items, o_w_id,
    CASE WHEN o_carrier_id IS NULL THEN NULL ELSE now() END, 5,
    CASE WHEN o_carrier_id IS NULL THEN 10 ELSE 0 END, repeat('d', 24)
  FROM orders, generate_series(1, 10) n;
