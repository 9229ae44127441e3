/* pread-offset FILE SIZE N [OFFSET]: writes a 64 MiB file, then N preads of SIZE at random
 * multiples of SIZE into a buffer OFFSET bytes into a page; prints the time per pread. The
 * copy-distance measurement of docs/benchmarks.md ("Reads of byte-granular pieces"):
 * cc -O2 -o pread-offset scripts/pread-offset.c; nosefs run --image IMG --at DIR -- ./pread-offset DIR/f 4096 200000 16 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  size_t size=atoi(argv[2]); int n=atoi(argv[3]); size_t flen=64<<20;
  int fd=open(argv[1],O_RDWR|O_CREAT|O_TRUNC,0644); char*w=malloc(1<<20); memset(w,7,1<<20);
  for(size_t o=0;o<flen;o+=1<<20) pwrite(fd,w,1<<20,o);
  size_t off=argc>4?atoi(argv[4]):0; char*buf=(char*)aligned_alloc(4096,size+8192)+off; unsigned long long x=88172645463325252ULL;
  double t=now();
  for(int i=0;i<n;i++){x^=x<<13;x^=x>>7;x^=x<<17; if(pread(fd,buf,size,(x%(flen/size))*size)!=(ssize_t)size){perror("pread");return 1;}}
  double e=now()-t; printf("%zu-byte preads: %.0f ns each (buffer at page offset %lu)\n",size,e/n,(unsigned long)buf&4095);
  close(fd); unlink(argv[1]); return 0;}
