/*
 * Test plugin: the envs of faults.c with the optional batched call (`step_batch`), so that
 * the same faults happen inside one call for a worker's envs.
 */
#define FAULTS_BATCHED
#include "faults.c"
