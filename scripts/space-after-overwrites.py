#!/usr/bin/env python3
"""Space a file pins after random overwrites (issue 24): writes an 80 MiB file in 4 KiB blocks,
then 20,480 random overwrites + fsync of 1, 2, 4, 8 and 16 KiB in turn (the fileops overwrite
phases), and prints the space in use (statvfs, less what was used before the file) over the
file's size after each phase.

Usage: nosefs mkfs --size 512M img && nosefs mount img mnt [-o compactor]
       python3 scripts/space-after-overwrites.py mnt/f
"""
import os, random, sys
path = sys.argv[1]
size = 80 << 20
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
blk = b'\xa5' * 4096
for k in range(size // 4096):
    os.pwrite(fd, blk, k * 4096)
os.fsync(fd)
def used():
    st = os.statvfs(os.path.dirname(path))
    return (st.f_blocks - st.f_bfree) * st.f_frsize
base = used() - size
random.seed(1)
for n in (1024, 2048, 4096, 8192, 16384):
    data = bytes([n % 251]) * n
    for i in range(20480):
        at = random.randrange(size - n + 1)
        os.pwrite(fd, data, at); os.fsync(fd)
    print(f"after {n}-byte overwrites: used {(used() - base) / size:.3f}x the file's size")
os.close(fd)
