/* Test library: a shared library that is not a shmenv plugin (no entry function). */
int not_a_plugin(void) { return 0; }
