/* What making a page of a fresh /dev/shm file ready costs: maps MIB MiB of a new file shared and
 * populates it with MADV_POPULATE_WRITE in CHUNK_KIB chunks, or (CHUNK_KIB 0) by one store per
 * page; prints the time per 4 KiB page. docs/benchmarks.md ("A fresh image's pages cost what the
 * write itself costs here"): cc -O2 -o populate-cost scripts/populate-cost.c;
 * ./populate-cost /dev/shm/x 512 4096 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  size_t mib=atoi(argv[2]); size_t chunk=(size_t)atoi(argv[3])<<10; size_t len=mib<<20;
  int fd=open(argv[1],O_RDWR|O_CREAT|O_TRUNC,0644); ftruncate(fd,len);
  char*p=mmap(0,len,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
  double t=now();
  if(chunk==0){ for(size_t o=0;o<len;o+=4096)p[o]=1; }
  else for(size_t o=0;o<len;o+=chunk) madvise(p+o,chunk,MADV_POPULATE_WRITE);
  double e=now()-t; printf("%s chunk %zu KiB: %.0f ns per 4 KiB page\n", chunk?"populate":"touch", chunk>>10, e/(len/4096));
  unlink(argv[1]); return 0;}
