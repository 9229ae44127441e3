# The TPC-C-like mix on SQLite, one client, the database's defaults (rollback journal) with
# synchronous=FULL: the same schema, population and five transactions as the pgbench scripts
# beside this file, each transaction one durable commit. Arguments: database, transactions,
# warehouses, customers per district, items, the schema's SQL, the checks' SQL. Prints a JSON
# report: phases (all transactions; new orders alone), the committed new orders and payments,
# and, after the database is closed and opened again, integrity_check and the checks' answers.
import json, random, sqlite3, sys, time

path, n = sys.argv[1], int(sys.argv[2])
warehouses, customers, items = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
schema, checks = sys.argv[6], sys.argv[7]
rnd = random.Random(5)
db = sqlite3.connect(path, isolation_level=None)
db.execute('pragma synchronous=full')
db.executescript(schema)
W, D, C = range(1, warehouses + 1), range(1, 11), range(1, customers + 1)
undelivered = lambda o: o * 10 > customers * 7
now = lambda: time.strftime('%Y-%m-%d %H:%M:%S')
db.execute('begin')
db.executemany('insert into warehouse values (?, ?, 0.1, 300000)', ((w, 'w%d' % w) for w in W))
db.executemany('insert into district values (?, ?, ?, 0.1, 30000, ?)',
               ((w, d, 'd%d' % d, customers + 1) for w in W for d in D))
db.executemany("insert into customer values (?, ?, ?, ?, 'GC', 0.05, -10, 10, 1, 0, ?)",
               ((w, d, c, 'last%d' % (c % 1000), 'c' * 300) for w in W for d in D for c in C))
db.executemany('insert into item values (?, ?, ?, ?)',
               ((i, 'item%d' % i, 1 + i % 100, 'i' * 40) for i in range(1, items + 1)))
db.executemany('insert into stock values (?, ?, 50, 0, 0, 0, ?, ?)',
               ((w, i, 's' * 24, 's' * 40) for w in W for i in range(1, items + 1)))
db.executemany('insert into orders values (?, ?, ?, ?, ?, ?, 10)',
               ((w, d, o, o, now(), None if undelivered(o) else 1) for w in W for d in D for o in C))
db.executemany('insert into new_order values (?, ?, ?)',
               ((w, d, o) for w in W for d in D for o in C if undelivered(o)))
db.executemany('insert into order_line values (?, ?, ?, ?, ?, ?, ?, 5, ?, ?)',
               ((w, d, o, k, 1 + (o * 7 + k * 13) % items, w, None if undelivered(o) else now(),
                 10 if undelivered(o) else 0, 'd' * 24)
                for w in W for d in D for o in C for k in range(1, 11)))
db.execute('commit')
one = lambda sql, *args: db.execute(sql, args).fetchone()

def new_order():
    w, d, c = rnd.choice(W), rnd.choice(D), rnd.choice(C)
    one('select w_tax from warehouse where w_id = ?', w)
    one('select c_discount, c_last, c_credit from customer where c_w_id = ? and c_d_id = ? and c_id = ?', w, d, c)
    o, _ = one('select d_next_o_id, d_tax from district where d_w_id = ? and d_id = ?', w, d)
    db.execute('update district set d_next_o_id = d_next_o_id + 1 where d_w_id = ? and d_id = ?', (w, d))
    lines = [(k, rnd.randint(1, items), rnd.randint(1, 10)) for k in range(1, rnd.randint(5, 15) + 1)]
    db.execute('insert into orders values (?, ?, ?, ?, ?, null, ?)', (w, d, o, c, now(), len(lines)))
    db.execute('insert into new_order values (?, ?, ?)', (w, d, o))
    for k, i, qty in lines:
        (price,) = one('select i_price from item where i_id = ?', i)
        db.execute('update stock set s_quantity = case when s_quantity >= ? + 10 then s_quantity - ? '
                   'else s_quantity - ? + 91 end, s_ytd = s_ytd + ?, s_order_cnt = s_order_cnt + 1 '
                   'where s_w_id = ? and s_i_id = ?', (qty, qty, qty, qty, w, i))
        db.execute("insert into order_line values (?, ?, ?, ?, ?, ?, null, ?, ?, 'dist-info')",
                   (w, d, o, k, i, w, qty, qty * price))

def payment():
    w, d, c, amount = rnd.choice(W), rnd.choice(D), rnd.choice(C), rnd.randint(100, 500000) / 100
    db.execute('update warehouse set w_ytd = w_ytd + ? where w_id = ?', (amount, w))
    db.execute('update district set d_ytd = d_ytd + ? where d_w_id = ? and d_id = ?', (amount, w, d))
    db.execute('update customer set c_balance = c_balance - ?, c_ytd_payment = c_ytd_payment + ?, '
               'c_payment_cnt = c_payment_cnt + 1 where c_w_id = ? and c_d_id = ? and c_id = ?',
               (amount, amount, w, d, c))
    db.execute("insert into history values (?, ?, ?, ?, ?, ?, ?, 'payment')", (c, d, w, d, w, now(), amount))

def order_status():
    w, d, c = rnd.choice(W), rnd.choice(D), rnd.choice(C)
    one('select c_balance, c_last from customer where c_w_id = ? and c_d_id = ? and c_id = ?', w, d, c)
    (o,) = one('select o_id from orders where o_w_id = ? and o_d_id = ? and o_c_id = ? '
               'order by o_id desc limit 1', w, d, c)
    db.execute('select ol_i_id, ol_quantity, ol_amount, ol_delivery_d from order_line '
               'where ol_w_id = ? and ol_d_id = ? and ol_o_id = ?', (w, d, o)).fetchall()

def delivery():
    w, carrier = rnd.choice(W), rnd.randint(1, 10)
    for d in D:
        row = one('select min(no_o_id) from new_order where no_w_id = ? and no_d_id = ?', w, d)
        if row[0] is None:
            continue
        o = row[0]
        db.execute('delete from new_order where no_w_id = ? and no_d_id = ? and no_o_id = ?', (w, d, o))
        (c,) = one('select o_c_id from orders where o_w_id = ? and o_d_id = ? and o_id = ?', w, d, o)
        db.execute('update orders set o_carrier_id = ? where o_w_id = ? and o_d_id = ? and o_id = ?',
                   (carrier, w, d, o))
        db.execute('update order_line set ol_delivery_d = ? where ol_w_id = ? and ol_d_id = ? and ol_o_id = ?',
                   (now(), w, d, o))
        (amount,) = one('select sum(ol_amount) from order_line where ol_w_id = ? and ol_d_id = ? and ol_o_id = ?',
                        w, d, o)
        db.execute('update customer set c_balance = c_balance + ?, c_delivery_cnt = c_delivery_cnt + 1 '
                   'where c_w_id = ? and c_d_id = ? and c_id = ?', (amount, w, d, c))

def stock_level():
    w, d, threshold = rnd.choice(W), rnd.choice(D), rnd.randint(10, 20)
    one('select count(distinct s_i_id) from district, order_line, stock '
        'where d_w_id = ? and d_id = ? and ol_w_id = ? and ol_d_id = ? '
        'and ol_o_id < d_next_o_id and ol_o_id >= d_next_o_id - 20 '
        'and s_w_id = ? and s_i_id = ol_i_id and s_quantity < ?', w, d, w, d, w, threshold)

mix = [new_order] * 45 + [payment] * 43 + [order_status] * 4 + [delivery] * 4 + [stock_level] * 4
lat, new_order_lat, committed = [], [], {new_order: 0, payment: 0}
start = time.perf_counter_ns()
for _ in range(n):
    tx = rnd.choice(mix)
    t0 = time.perf_counter_ns()
    db.execute('begin')
    tx()
    db.execute('commit')
    took = time.perf_counter_ns() - t0
    lat.append(took)
    if tx is new_order:
        new_order_lat.append(took)
    if tx in committed:
        committed[tx] += 1
elapsed = time.perf_counter_ns() - start
db.close()
db = sqlite3.connect(path, isolation_level=None)
integrity = one('pragma integrity_check')[0]
statements = '\n'.join(l for l in checks.splitlines() if not l.startswith('--')).split(';')
counts = [str(one(q)[0]) for q in statements if q.strip()]
print(json.dumps({
    'phases': [{'op': 'tpcc', 'elapsed_ns': elapsed, 'lat': lat},
               {'op': 'tpcc-new-order', 'elapsed_ns': elapsed, 'lat': new_order_lat}],
    'new_orders': committed[new_order], 'payments': committed[payment],
    'integrity': integrity, 'counts': '\n'.join(counts)}))
