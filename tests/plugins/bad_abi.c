/* Test plugin: built for an ABI version this shmenv does not implement. */
#include "shmenv_env.h"

static const shmenv_plugin PLUGIN = {99, sizeof(shmenv_plugin), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
