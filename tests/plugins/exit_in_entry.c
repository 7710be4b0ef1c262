/* Test plugin: calls exit(5) in its entry function, before the host sees any table. */
#include "shmenv_env.h"

#include <stdio.h>
#include <stdlib.h>

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) {
    fprintf(stderr, "exit_in_entry plugin: exiting\n");
    exit(5);
}
