/* fstat-loop FILE N: N fstat calls on one read-only description of FILE, then 2,000 opens
 * (read-only) + fstat + close of it, then 2,000 opens + close without the fstat (what a
 * read-only open pays where nothing asks for its attributes); prints nanoseconds for each. Under `nosefs run
 * --at MNT` it measures a daemon client's fstat answered from what its open brought
 * (docs/benchmarks.md, "fstat without a round trip ... reverted").
 * cc -O2 -o fstat-loop scripts/fstat-loop.c; nosefs run --at MNT -- ./fstat-loop MNT/f 200000 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
int main(int c, char **v) {
  int n = atoi(v[2]); struct stat st; struct timespec a, b;
  int fd = open(v[1], O_RDONLY);
  if (fd < 0) { perror(v[1]); return 1; }
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; i++) if (fstat(fd, &st)) { perror("fstat"); return 1; }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.0f ns per fstat of a read-only description\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
  int k = 2000; clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < k; i++) { int f = open(v[1], O_RDONLY); fstat(f, &st); close(f); }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.0f ns per open + fstat + close\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / k);
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < k; i++) close(open(v[1], O_RDONLY));
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.0f ns per open + close\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / k);
  return 0;
}
