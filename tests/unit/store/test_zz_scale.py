import time, pytest
from contextlib import contextmanager
from tests.support.retention import fill
from tests.unit.store.test_retention import KEEP, NOW, T0, counting_writes, DAY
from tests.support.stores import EVERY_DATABASE

@pytest.mark.parametrize("n", [5000, 20000])
@EVERY_DATABASE
def test_scale(store, n):
    for k in range(0, n, 5000):
        fill(store, 5000, T0, first=k)
    fill(store, 2000, NOW - DAY, first=n)
    with counting_writes(store) as holds:
        t = time.perf_counter()
        r = store.prune(KEEP, now=NOW, batch_size=200)
        el = time.perf_counter() - t
    print(f"\n{store.engine.dialect.name} n={n}: prune {el:.2f}s, {r.batches} batches, longest hold {max(holds)*1000:.0f} ms, total hold {sum(holds):.2f}s")
