// What a fresh page of a /dev/shm file costs here, by route: MADV_POPULATE_WRITE (0), fallocate then
// MADV_POPULATE_WRITE (1), fallocate then a store per page (2), a store per page (3),
// MADV_POPULATE_WRITE per 2 MiB (4). gcc -O2 -o page-cost scripts/page-cost.c; ./page-cost MODE
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <time.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t sz=256<<20, pages=sz/4096; int mode=atoi(argv[1]);
  unlink("/dev/shm/pop3"); int fd=open("/dev/shm/pop3",O_RDWR|O_CREAT,0600); ftruncate(fd,sz);
  char*p=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
  double t0=now(), t1;
  if(mode==0){ madvise(p,sz,MADV_POPULATE_WRITE); }
  else if(mode==1){ fallocate(fd,0,0,sz); t1=now(); printf("fallocate %.2f us/page\n",(t1-t0)*1e6/pages); t0=t1; madvise(p,sz,MADV_POPULATE_WRITE);}
  else if(mode==2){ fallocate(fd,0,0,sz); t1=now(); printf("fallocate %.2f us/page\n",(t1-t0)*1e6/pages); t0=t1; for(size_t i=0;i<sz;i+=4096)p[i]=1;}
  else if(mode==3){ for(size_t i=0;i<sz;i+=4096)p[i]=1;}
  else if(mode==4){ for(size_t off=0;off<sz;off+=2<<20) madvise(p+off,2<<20,MADV_POPULATE_WRITE);}
  t1=now(); printf("mode %d: %.2f us/page\n",mode,(t1-t0)*1e6/pages);
  unlink("/dev/shm/pop3"); return 0;}
