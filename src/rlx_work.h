/* The work meter's note, inlined into every kernel module.
 *
 * The meter itself (one counter per OpenMP thread number, a switch) lives in
 * rlx_cpu._launch; each module binds these two pointers to it when it is
 * imported (work_meter_bind in src/rlx_cpu/_launch.pxd).  Off, a note is two
 * loads and a branch, with no call, so a kernel's parallel loop can note
 * every item it runs. */
#ifndef RLX_WORK_H
#define RLX_WORK_H

static const volatile int *rlx_work_flag;
static void (*rlx_work_sink)(long long);

static inline void rlx_work_bind(const int *flag, void (*sink)(long long))
{
    rlx_work_flag = flag;
    rlx_work_sink = sink;
}

static inline void rlx_work_note(long long items)
{
    if (rlx_work_flag && *rlx_work_flag)
        rlx_work_sink(items);
}
#endif
