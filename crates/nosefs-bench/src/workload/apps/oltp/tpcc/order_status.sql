-- Order-Status (TPC-C 2.6): a customer's balance and the lines of their newest order.
\set w_id random(1, :warehouses)
\set d_id random(1, 10)
\set c_id random(1, :customers)
BEGIN;
SELECT c_balance, c_last FROM customer WHERE c_w_id = :w_id AND c_d_id = :d_id AND c_id = :c_id;
SELECT ol_i_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line
  WHERE (ol_w_id, ol_d_id, ol_o_id) = (SELECT o_w_id, o_d_id, o_id FROM orders
    WHERE o_w_id = :w_id AND o_d_id = :d_id AND o_c_id = :c_id ORDER BY o_id DESC LIMIT 1);
END;
