/* A call that comes after the caller computed: stat, open (+ close) and pread of one file, N
 * times each, with WORK iterations of a loop between two calls (100,000: ~75 us here); prints
 * the mean, p50 and p90 of the calls alone. Shows whether a daemon's server thread is still
 * awake when a client that computes asks again. docs/benchmarks.md ("A server thread polls ten
 * times longer while its CPU would idle"):
 * cc -O2 -o call-after-compute scripts/call-after-compute.c
 * ./call-after-compute /dev/shm/d 3000 100000; nosefs run --at MNT -- ./call-after-compute MNT 3000 100000 */
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>
#include <string.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
volatile unsigned long sink=0;
static void w(int work){for(int k=0;k<work;k++) sink+=k*k;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static double*s;
static void rep(const char*name,int n){qsort(s,n,sizeof(double),cmp);double sum=0;for(int i=0;i<n;i++)sum+=s[i];printf("%s mean %.2f p50 %.2f p90 %.2f | ",name,sum/n/1000,s[n/2]/1000,s[n*9/10]/1000);}
int main(int argc,char**argv){
  const char*dir=argv[1]; int n=atoi(argv[2]); int work=argc>3?atoi(argv[3]):0;
  s=malloc(sizeof(double)*n);
  char p[4096]; snprintf(p,sizeof p,"%s/f",dir);
  int fd=open(p,O_CREAT|O_RDWR,0644); char buf[4096]; memset(buf,'x',4096); write(fd,buf,4096); close(fd);
  struct stat st; double t;
  for(int i=0;i<n;i++){ t=now(); stat(p,&st); s[i]=now()-t; w(work);} rep("stat",n);
  for(int i=0;i<n;i++){ t=now(); int f=open(p,O_RDONLY); s[i]=now()-t; w(work); close(f); w(work);} rep("open",n);
  fd=open(p,O_RDONLY);
  for(int i=0;i<n;i++){ t=now(); pread(fd,buf,4096,0); s[i]=now()-t; w(work);} rep("pread",n);
  printf("\n");
}
