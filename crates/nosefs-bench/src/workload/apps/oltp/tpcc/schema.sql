-- TPC-C's nine tables (clause 1.3), the columns the five transactions here read or write.
-- Plain SQL that PostgreSQL and SQLite both take.
CREATE TABLE warehouse (w_id int PRIMARY KEY, w_name text, w_tax numeric(4,4), w_ytd numeric(12,2));
CREATE TABLE district (d_w_id int, d_id int, d_name text, d_tax numeric(4,4),
  d_ytd numeric(12,2), d_next_o_id int, PRIMARY KEY (d_w_id, d_id));
CREATE TABLE customer (c_w_id int, c_d_id int, c_id int, c_last text, c_credit text,
  c_discount numeric(4,4), c_balance numeric(12,2), c_ytd_payment numeric(12,2),
  c_payment_cnt int, c_delivery_cnt int, c_data text, PRIMARY KEY (c_w_id, c_d_id, c_id));
CREATE TABLE history (h_c_id int, h_c_d_id int, h_c_w_id int, h_d_id int, h_w_id int,
  h_date timestamp, h_amount numeric(6,2), h_data text);
CREATE TABLE orders (o_w_id int, o_d_id int, o_id int, o_c_id int, o_entry_d timestamp,
  o_carrier_id int, o_ol_cnt int, PRIMARY KEY (o_w_id, o_d_id, o_id));
CREATE INDEX orders_by_customer ON orders (o_w_id, o_d_id, o_c_id, o_id);
CREATE TABLE new_order (no_w_id int, no_d_id int, no_o_id int,
  PRIMARY KEY (no_w_id, no_d_id, no_o_id));
CREATE TABLE order_line (ol_w_id int, ol_d_id int, ol_o_id int, ol_number int, ol_i_id int,
  ol_supply_w_id int, ol_delivery_d timestamp, ol_quantity int, ol_amount numeric(6,2),
  ol_dist_info text, PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number));
CREATE TABLE item (i_id int PRIMARY KEY, i_name text, i_price numeric(5,2), i_data text);
CREATE TABLE stock (s_w_id int, s_i_id int, s_quantity int, s_ytd int, s_order_cnt int,
  s_remote_cnt int, s_dist text, s_data text, PRIMARY KEY (s_w_id, s_i_id));
