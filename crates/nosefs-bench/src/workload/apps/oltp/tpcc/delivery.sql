-- Delivery (TPC-C 2.7): the oldest undelivered order of each district of a warehouse is
-- delivered: out of new_order, a carrier on the order, a date on its lines, the amount on the
-- customer's balance.
\set w_id random(1, :warehouses)
\set carrier random(1, 10)
BEGIN;
WITH oldest AS (
    DELETE FROM new_order WHERE (no_w_id, no_d_id, no_o_id) IN (
      SELECT no_w_id, no_d_id, min(no_o_id) FROM new_order WHERE no_w_id = :w_id
      GROUP BY no_w_id, no_d_id)
    RETURNING no_w_id, no_d_id, no_o_id),
  delivered AS (
    UPDATE orders SET o_carrier_id = :carrier FROM oldest
    WHERE o_w_id = no_w_id AND o_d_id = no_d_id AND o_id = no_o_id
    RETURNING o_w_id, o_d_id, o_id, o_c_id),
  lines AS (
    UPDATE order_line SET ol_delivery_d = now() FROM oldest
    WHERE ol_w_id = no_w_id AND ol_d_id = no_d_id AND ol_o_id = no_o_id
    RETURNING ol_w_id, ol_d_id, ol_o_id, ol_amount)
UPDATE customer SET c_balance = c_balance + t.amount, c_delivery_cnt = c_delivery_cnt + 1
  FROM (SELECT o_w_id, o_d_id, o_c_id, sum(ol_amount) AS amount
    FROM delivered JOIN lines ON ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
    GROUP BY o_w_id, o_d_id, o_c_id) t
  WHERE c_w_id = t.o_w_id AND c_d_id = t.o_d_id AND c_id = t.o_c_id;
END;
