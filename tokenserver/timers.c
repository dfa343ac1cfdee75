/*
 * The server's one-shot timers, kept in memory: a pairing heap of the
 * armed ones, ordered by when each fires. The loop (loop.c) sleeps until
 * the earliest and then fires those due. Arming, re-arming and disarming
 * a timer only move pointers: none of them can fail, and no timer costs a
 * descriptor.
 *
 * A timer is armed exactly when its `at` is not 0; then it is in the heap.
 * A callback may arm, disarm or free any timer, its own included: one that
 * is due is taken out of the heap before its callback runs, and nothing
 * touches it afterwards.
 */
#include "server.h"

/* Timers fired per round of the loop at most: a callback that keeps
 * re-arming a timer for a time already past cannot hold the loop, whose
 * sockets are served in between. */
#define TIMERS_PER_ROUND 256

/* The heap's root (the earliest armed timer), NULL when none is armed;
 * owned by the loop's (only) thread. */
static struct timer *root;

/* The heap of a and the heap of b as one; either may be NULL. Each root
 * has no siblings. */
static struct timer *meld(struct timer *a, struct timer *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (b->at < a->at) {
        struct timer *x = a;
        a = b;
        b = x;
    }
    /* b becomes a's first child: its prev is its parent */
    b->prev = a;
    b->next = a->child;
    if (a->child)
        a->child->prev = b;
    a->child = b;
    a->next = a->prev = NULL;
    return a;
}

/* The heaps of a list of siblings (linked by next) as one: melded in
 * pairs from the left, then the pairs from the right (two passes). */
static struct timer *merge_siblings(struct timer *first)
{
    struct timer *pairs = NULL; /* the melded pairs, the last first */
    while (first) {
        struct timer *a = first, *b = first->next;
        first = b ? b->next : NULL;
        a->next = a->prev = NULL;
        if (b)
            b->next = b->prev = NULL;
        struct timer *m = meld(a, b);
        m->next = pairs;
        pairs = m;
    }
    struct timer *heap = NULL;
    while (pairs) {
        struct timer *next = pairs->next;
        pairs->next = NULL;
        heap = meld(heap, pairs);
        pairs = next;
    }
    return heap;
}

/* Takes the armed timer t out of the heap. */
static void heap_remove(struct timer *t)
{
    if (t == root) {
        root = merge_siblings(t->child);
    } else {
        /* t's prev is its parent if t is the parent's first child, else
         * its previous sibling */
        if (t->prev->child == t)
            t->prev->child = t->next;
        else
            t->prev->next = t->next;
        if (t->next)
            t->next->prev = t->prev;
        root = meld(root, merge_siblings(t->child));
    }
    t->child = t->next = t->prev = NULL;
}

void timer_init(struct timer *t, void (*fn)(void *), void *arg)
{
    *t = (struct timer){.fn = fn, .arg = arg};
}

void timer_at(struct timer *t, uint64_t when_ns)
{
    if (t->at)
        heap_remove(t);
    t->at = when_ns;
    if (when_ns) {
        t->child = t->next = t->prev = NULL;
        root = meld(root, t);
    }
}

void timer_close(struct timer *t)
{
    timer_at(t, 0);
}

uint64_t timers_next(void)
{
    return root ? root->at : 0;
}

void timers_fire(uint64_t now)
{
    for (int i = 0; i < TIMERS_PER_ROUND && root && root->at <= now; i++) {
        struct timer *t = root;
        heap_remove(t);
        t->at = 0;
        t->fn(t->arg);
    }
}
