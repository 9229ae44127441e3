/* How fast memcpy copies SIZE bytes at given offsets of source and destination within their
 * pages (the best of many copies of cached data): on the AMD EPYC here a destination 1-31 bytes
 * past the source modulo 4 KiB makes rep movsb 10-16x slower (docs/benchmarks.md, "Reads of
 * byte-granular pieces"). cc -O2 -o copy-distance scripts/copy-distance.c;
 * ./copy-distance SIZE SRC_OFFSET DST_OFFSET */
#include <fcntl.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  size_t piece=atoi(argv[1]); int srcmis=atoi(argv[2]), dstmis=atoi(argv[3]);
  size_t B=(size_t)1<<26; char*src=aligned_alloc(4096,B); char*dst=aligned_alloc(4096,B); memset(src,1,B); memset(dst,0,B);
  double best=1e18;
  int reps=piece>65536?20:2000; for(int rep=0;rep<reps;rep++){double t=now(); for(int i=0;i<16;i++) memcpy(dst+i*(piece+8192)+dstmis, src+i*(piece+8192)+srcmis, piece); double e=now()-t; if(e<best)best=e;}
  printf("piece %zu src+%d dst+%d: %.0f ns per copy\n",piece,srcmis,dstmis,best/16);
  return 0;}
