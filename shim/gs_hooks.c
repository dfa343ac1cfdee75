/*
 * Hook state that outlives a single call: what a forked child must reset.
 * (Nothing yet: the pass-through hooks keep no state.)
 */
#include "gs_hooks.h"

void gs_hooks_after_fork_child(void)
{
}
