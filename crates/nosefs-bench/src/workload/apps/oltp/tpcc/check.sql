-- After a restart: the orders and history the run committed, then TPC-C's consistency
-- conditions 2 (every district's next order number follows its newest order) and 3 (no order's
-- line count differs from its lines), as numbers of offenders.
SELECT count(*) FROM orders;
SELECT count(*) FROM history;
SELECT count(*) FROM district WHERE d_next_o_id - 1 <> (SELECT max(o_id) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id);
SELECT count(*) FROM orders WHERE o_ol_cnt <> (SELECT count(*) FROM order_line WHERE ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id);
