#include <dlfcn.h>
#include <stdio.h>
int main(void) { void *h = dlopen("libm.so.6", RTLD_NOW); printf("bare name: %s\n", h ? "found" : dlerror()); return 0; }
