#include <dlfcn.h>
#include <stdio.h>
int main(void) { void *h = dlopen("libanswer.so", RTLD_NOW); printf("by the program runpath: %s\n", h ? "found" : "not found"); return 0; }
