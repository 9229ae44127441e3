-- New-Order (TPC-C 2.4): 5-15 lines of random items from the home warehouse.
\set w_id random(1, :warehouses)
\set d_id random(1, 10)
\set c_id random(1, :customers)
\set ol_cnt random(5, 15)
BEGIN;
SELECT w_tax FROM warehouse WHERE w_id = :w_id;
SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id = :w_id AND c_d_id = :d_id AND c_id = :c_id;
UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = :w_id AND d_id = :d_id
  RETURNING d_next_o_id - 1 AS o_id, d_tax \gset
INSERT INTO orders VALUES (:w_id, :d_id, :o_id, :c_id, now(), NULL, :ol_cnt);
INSERT INTO new_order VALUES (:w_id, :d_id, :o_id);
WITH lines AS MATERIALIZED (
    SELECT n, 1 + (random() * (:items - 1))::int AS i_id, 1 + (random() * 9)::int AS qty
    FROM generate_series(1, :ol_cnt) n),
  taken AS (
    UPDATE stock SET s_quantity = CASE WHEN s_quantity >= l.qty + 10 THEN s_quantity - l.qty
        ELSE s_quantity - l.qty + 91 END,
      s_ytd = s_ytd + l.qty, s_order_cnt = s_order_cnt + 1
    FROM (SELECT i_id, sum(qty) AS qty FROM lines GROUP BY i_id) l
    WHERE s_w_id = :w_id AND s_i_id = l.i_id)
INSERT INTO order_line
  SELECT :w_id, :d_id, :o_id, n, lines.i_id, :w_id, NULL, qty, qty * i_price, 'dist-info'
  FROM lines JOIN item ON item.i_id = lines.i_id;
END;
