/* SPDX-License-Identifier: MIT */
/*
 * The findings' catalogue: every rule is one entry of this table (what it tallies, when it fires, its
 * severity thresholds on its share of a typical step, its fix and its source), evaluated in order at
 * settle, after the step's anatomy; docs/findings.md lists them with their evidence. A new rule of a
 * kind the generic evaluators know (calls every step, a setting switched by a call, a dtype) is an
 * entry and nothing else.
 */
#include "config.h"
#include "findings_catalogue.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "ranks.h"
#include "findings_anatomy.h"
#include "findings_generic.h"
#include "findings_loops.h"
#include "findings_gpu.h"
#include "findings_rules.h"
#include "findings_tally.h"

#define TUNING "PyTorch performance tuning guide"
#define NEVER FINDINGS_NEVER
#define FWD_BWD (1 << PART_FORWARD | 1 << PART_BACKWARD | 1 << PART_EVAL)
#define COMPUTE (FWD_BWD | 1 << PART_OPTIMIZER | 1 << PART_OTHER)

static const rule_t rules[] = {
    /* ---- the step's parts ---- */
    {.kind = "input_bound", .evaluate = rule_input_bound, .medium = 0.15, .high = 0.30,
     .fix = "Load in worker processes: DataLoader(..., num_workers=4, pin_memory=True, persistent_workers=True), "
            "and make the Dataset's __getitem__ cheap (vectorised tensor ops, data prepared once).",
     .source = TUNING ": enable asynchronous data loading; TorchTidy: SynchronizedDataLoaderPattern"},
    {.kind = "loader_workers_restarted", .evaluate = rule_loader_workers_restarted, .medium = 0.05, .high = 0.20,
     .fix = "DataLoader(..., num_workers=N, persistent_workers=True): the workers and their copies of the Dataset "
            "stay up from one epoch to the next; or fewer, longer epochs.",
     .source = "PyTorch docs: torch.utils.data.DataLoader persistent_workers; Lightning: the persistent_workers "
               "warning of its data connector"},
    {.kind = "python_outside_torch", .evaluate = rule_python_outside_torch, .medium = 0.15, .high = 0.30,
     .fix = "Replace Python loops over tensor elements by tensor operations (a metric as (pred == y).float().mean()), "
            "move per-step bookkeeping out of the loop, or run it every N steps.",
     .source = "Lightning docs, speed up model training: avoid work in Python between operations"},
    {.kind = "host_sync", .evaluate = rule_host_sync, .medium = 0.05, .high = 0.20,
     /* the host waits for the device at these calls (on a GPU); on a CPU they are counted all the same */
     .apis = "torch.Tensor.item|torch.Tensor.tolist|torch.Tensor.cpu|torch.Tensor.numpy|torch.Tensor.__bool__|"
             "torch.Tensor.__float__|torch.Tensor.__int__|torch.Tensor.__index__|torch.Tensor.nonzero|torch.nonzero|"
             "torch.cuda.synchronize|torch.Tensor.any|torch.Tensor.all|torch.masked_select|torch.unique",
     .fix = "Keep values on the device: accumulate metrics as tensors (total += loss.detach()) and call "
            ".item()/.tolist()/.cpu() once every N steps or at the end; avoid `if tensor:` and nonzero() in the "
            "step.",
     .source = TUNING ": avoid unnecessary CPU-GPU synchronization; Lightning docs: don't call .item()"},
    /* ---- the step over the run ---- */
    {.kind = "growing_line", .evaluate = rule_growing_line, .medium = 0.05, .high = 0.20,
     .fix = "Something at that line grows with every step: a tensor or list extended each step and processed whole "
            "(torch.cat onto a history, a list of outputs stacked again). Keep a running value (a sum and a count, "
            "a fixed-size window), or do the whole-history work once at the end.",
     .source = "PyTorch FAQ: don't accumulate history across your training loop"},
    {.kind = "step_time_drift", .evaluate = rule_step_time_drift, .medium = 0.05, .high = 0.20,
     .fix = "Look for what grows with the run: tensors kept across steps (a loss appended to a list without .item() "
            "or .detach()), caches, hooks added each step; compare an early and a late step with tw-report --tree.",
     .source = "PyTorch FAQ: don't accumulate history across your training loop"},
    {.kind = "memory_growth", .evaluate = rule_memory_growth, .medium = 0, .high = NEVER,
     .fix = "Find what outlives the step: a loss or output kept in a list with its graph (append loss.item() or "
            "loss.detach()), tensors cached on self, hooks that store activations.",
     .source = "PyTorch FAQ: don't hold onto tensors and variables you don't need"},
    /* ---- loops in Python ---- */
    {.kind = "repeated_module", .evaluate = rule_repeated_module, .medium = 0.10, .high = 0.30,
     .fix = "Call the module once on the whole batch (its leading dimension), not once per sample or item: stack the "
            "inputs, or torch.func.vmap a per-sample function; a recurrent cell over time steps: nn.LSTM/nn.GRU over "
            "the sequence.",
     .source = "TorchTidy: ForLoopIndexingPattern; torch.func.vmap docs"},
    {.kind = "per_sample_loop", .evaluate = rule_per_sample_loop, .medium = 0.10, .high = 0.30,
     .fix = "Call it once on the whole batch: torch's functions take a batch (F.cross_entropy(logits, y); "
            "reduction='none' where each sample's value is needed), or torch.func.vmap a per-sample function.",
     .source = "TorchTidy: ForLoopIndexingPattern; torch.func.vmap docs"},
    {.kind = "per_tensor_loop", .evaluate = rule_per_tensor_loop, .medium = 0.05, .high = 0.20,
     .fix = "One multi-tensor call instead of a Python loop over the tensors: torch.nn.utils.clip_grad_norm_(params, "
            "max_norm, foreach=True), torch._foreach_mul_/_foreach_add_ for a manual update, torch.stack then one op "
            "for a norm or a statistic.",
     .source = "torch.optim docs: foreach and fused implementations; " TUNING ": fuse operations"},
    {.kind = "many_small_ops", .evaluate = rule_many_small_ops, .medium = 0.25, .high = 0.50,
     .fix = "Fuse them: torch.compile(model), a fused or foreach optimizer (Adam(fused=True)), CUDA graphs on a GPU; "
            "batch the small per-element work.",
     .source = TUNING ": fuse operations; use CUDA graphs"},
    {.kind = "optimizer_single_tensor", .evaluate = rule_optimizer_single_tensor, .medium = 0.03, .high = 0.30,
     .fix = "Use its multi-tensor path: foreach=True (torch's default for CUDA tensors only), or fused=True where the "
            "optimizer has it (Adam, AdamW, SGD).",
     .source = "torch.optim docs: foreach and fused implementations; TorchTidy: OptimizerSingleTensorPattern"},
    /* ---- calls a training step does not need ---- */
    {.kind = "checkpoint_every_step", .evaluate = rule_calls_every_step, .medium = 0.05, .high = 0.25,
     .apis = "torch.save|torch.load|torch.nn.Module.state_dict|torch.optim.Optimizer.state_dict|"
             "torch.nn.Module.load_state_dict",
     .message = "a checkpoint written (or read) in the training step.",
     .fix = "Save every N steps or at the end of an epoch (Lightning's ModelCheckpoint(every_n_train_steps=N), "
            "transformers' save_steps), not in every step.",
     .source = "transformers TrainingArguments save_steps; Lightning ModelCheckpoint every_n_train_steps"},
    {.kind = "model_copied_every_step", .evaluate = rule_calls_every_step, .medium = 0.05, .high = 0.25,
     .apis = "torch.Tensor.__deepcopy__|torch.nn.Parameter.__deepcopy__",
     .message = "tensors deep-copied in the training step (copy.deepcopy of a model: an average or a snapshot made the "
                "slow way).",
     .fix = "Keep one copy and update it in place: torch.optim.swa_utils.AveragedModel(model, "
            "multi_avg_fn=get_ema_multi_avg_fn(0.999)) and .update_parameters(model) each step, or "
            "torch._foreach_lerp_ over the parameters.",
     .source = "torch.optim docs: weight averaging (SWA and EMA)"},
    {.kind = "optimizer_rebuilt", .evaluate = rule_calls_every_step, .medium = 0.02, .high = 0.20,
     .apis = "torch.optim.Optimizer.add_param_group",
     .message = "an optimizer built again in the training step: its state (Adam's moments, momentum) starts from zero "
                "each time.",
     .fix = "Build the optimizer (and its LR scheduler) once before the loop; change the learning rate through "
            "optimizer.param_groups or a scheduler.",
     .source = "torch.optim docs: constructing an optimizer"},
    {.kind = "module_built_every_step", .evaluate = rule_built_every_step, .medium = 0, .high = NEVER,
     .apis = "torch.nn.Module.register_parameter",
     .message = "a layer built in the training step (its parameters registered, at that line or inside the call made "
                "there): its weights start from a new random init every time, so it never learns, and building it is "
                "paid in every step.",
     .fix = "Build every layer once, in the model's __init__ (self.head = nn.Linear(...)), and only call it in "
            "forward; a weight that must be made per call is a tensor, not a module.",
     .source = "PyTorch docs: Building models with PyTorch (layers defined in __init__, used in forward)"},
    {.kind = "module_moved_every_step", .evaluate = rule_calls_every_step, .medium = 0.05, .high = 0.25,
     .apis = "torch.nn.Module.to|torch.nn.Module.cuda|torch.nn.Module.cpu|torch.nn.Module.double|"
             "torch.nn.Module.float|torch.nn.Module.half|torch.nn.Module.bfloat16",
     .message = "the model moved or cast in the training step: every parameter is visited each time.",
     .fix = "Move and cast the model once, before the loop; move only the batch in the step (x.to(device, "
            "non_blocking=True)).",
     .source = TUNING ": create tensors directly on the target device"},
    {.kind = "cache_emptied_every_step", .evaluate = rule_calls_every_step, .medium = 0.02, .high = 0.20,
     .apis = "torch.cuda.empty_cache|torch.mps.empty_cache|torch.xpu.empty_cache",
     .message = "the allocator's cache emptied in the training step: the next step allocates from the driver again.",
     .fix = "Don't call empty_cache() in the loop; if memory is short, lower the batch or free the tensors kept "
            "across steps.",
     .source = "PyTorch CUDA semantics: memory management"},
    /* ---- settings that slow every call (switched by recorded calls) ---- */
    {.kind = "anomaly_detection", .evaluate = rule_setting, .medium = 0.05, .high = 0.30,
     .apis = "torch.set_anomaly_enabled", .switch_kind = SWITCH_FIRST_ARG, .affects = FWD_BWD,
     .message = "Autograd's anomaly detection is on (set_detect_anomaly / detect_anomaly): every forward operator "
                "keeps its Python traceback and every backward checks for NaN",
     .fix = "Turn it off outside debugging: remove torch.autograd.set_detect_anomaly(True) (or Trainer("
            "detect_anomaly=True)), or limit it to the steps being debugged with `with torch.autograd."
            "detect_anomaly():`.",
     .source = TUNING ": disable debugging APIs"},
    {.kind = "profiler_left_on", .evaluate = rule_setting, .medium = 0.05, .high = 0.30,
     /* (torchwrapper records these calls alone of the profilers' modules: _discover.py DIAGNOSTIC_POINTS) */
     .apis = "torch.profiler.profiler.profile.start|torch.autograd.profiler.profile.__enter__|"
             "torch.autograd.profiler.emit_nvtx.__enter__",
     .apis_off = "torch.profiler.profiler.profile.stop|torch.autograd.profiler.profile.__exit__|"
                 "torch.autograd.profiler.emit_nvtx.__exit__",
     .switch_kind = SWITCH_ENTER,
     .message = "torch's own profiler (torch.profiler / torch.autograd.profiler) records the step: every operator "
                "pays for its events",
     .fix = "Profile a few steps with a schedule (torch.profiler.schedule(wait=1, warmup=1, active=3)) and stop it, "
            "or leave the run to this profiler.",
     .source = TUNING ": disable debugging APIs"},
    {.kind = "deterministic_algorithms", .evaluate = rule_setting, .medium = 0.30, .high = NEVER,
     .apis = "torch.use_deterministic_algorithms", .switch_kind = SWITCH_FIRST_ARG, .affects = FWD_BWD,
     .message = "Deterministic algorithms are required (torch.use_deterministic_algorithms(True)): operators with a "
                "faster non-deterministic kernel (index_add, scatter_add, convolutions' cuDNN choices) take the slow "
                "one",
     .fix = "Use torch.use_deterministic_algorithms(True) for runs that must be bit-reproducible only, or "
            "warn_only=True to see which operators it slows.",
     .source = "PyTorch notes on reproducibility: deterministic operations are often slower"},
    {.kind = "one_thread", .evaluate = rule_setting, .medium = 0.30, .high = NEVER,
     .apis = "torch.set_num_threads", .switch_kind = SWITCH_ONE_THREAD, .affects = COMPUTE,
     .message = "torch runs its operators on one thread (torch.set_num_threads(1)) in the training process",
     .fix = "Leave torch's threads at their default (one per physical core) in the training process; one thread is "
            "for DataLoader workers (worker_init_fn) and for processes that share the cores.",
     .source = TUNING ": utilize OpenMP; PyTorch CPU threading notes"},
    {.kind = "too_many_threads", .evaluate = rule_setting, .medium = 0.30, .high = NEVER,
     .apis = "torch.set_num_threads", .switch_kind = SWITCH_MORE_THREADS, .affects = COMPUTE,
     .message = "torch runs more threads than the process has CPUs (torch.set_num_threads, OMP_NUM_THREADS): its "
                "threads wait for each other at every parallel operator",
     .fix = "At most one torch thread per CPU the process may use (len(os.sched_getaffinity(0))): the default; "
            "with DataLoader workers or several processes on one host, divide the CPUs between them.",
     .source = TUNING ": utilize OpenMP; PyTorch CPU threading notes: oversubscription"},
    {.kind = "float64_compute", .evaluate = rule_dtype, .medium = 0.10, .high = 0.40,
     .apis = "torch.nn.functional.linear|torch.matmul|torch.mm|torch.bmm|torch.addmm|torch.baddbmm|torch.einsum|"
             "torch.Tensor.matmul|torch.Tensor.__matmul__|torch.Tensor.mm|torch.Tensor.bmm|torch.conv1d|torch.conv2d|"
             "torch.conv3d|torch.nn.functional.scaled_dot_product_attention|torch.nn.functional.bilinear|"
             "torch._VF.lstm|torch.lstm|torch.gru",
     .fix = "Train in float32 (model.float(), tensors from numpy with torch.from_numpy(a).float(), no "
            "torch.set_default_dtype(torch.float64)), and in bfloat16/float16 under torch.autocast where the model "
            "allows.",
     .source = TUNING ": use mixed precision; transformers docs: efficient training on one GPU (fp16, bf16, tf32)"},
    {.kind = "eval_with_grad", .evaluate = rule_eval_with_grad, .medium = 0.01, .high = 0.20,
     .fix = "Wrap evaluation in `with torch.no_grad():` (or torch.inference_mode()): model.eval() changes dropout "
            "and batch norm, not autograd.",
     .source = TUNING ": disable gradient calculation for validation or inference"},
    /* (low always: a teacher's or an averaged model's forward under no_grad is the step's own work) */
    {.kind = "evaluation_every_step", .evaluate = rule_evaluation_every_step, .medium = NEVER, .high = NEVER,
     .fix = "Validate every N steps or once an epoch (transformers eval_strategy/eval_steps, Lightning "
            "val_check_interval/check_val_every_n_epoch), on a subset where it must be frequent. A teacher's or an "
            "averaged model's forward that the loss needs is the step's own work: keep it.",
     .source = "Lightning docs: val_check_interval; transformers docs: TrainingArguments eval_strategy, eval_steps"},
    /* ---- the GPU (its records: CUPTI's kernels, copies and fills) ---- */
    {.kind = "gpu_idle", .evaluate = rule_gpu_idle, .medium = 0.30, .high = 0.60,
     .fix = "Keep the GPU fed: load in worker processes with pinned memory (num_workers, pin_memory=True, "
            "non_blocking=True copies), move per-step Python and host syncs out of the step, and give the GPU more "
            "work a launch (a larger batch, torch.compile, CUDA graphs).",
     .source = "HTA: idle time breakdown; " TUNING ": avoid unnecessary CPU-GPU synchronization"},
    {.kind = "tiny_kernels", .evaluate = rule_tiny_kernels, .medium = 0.30, .high = 0.60,
     .fix = "Fewer, larger kernels: torch.compile(model) fuses element-wise chains, a fused or foreach optimizer "
            "(Adam(fused=True)), CUDA graphs (torch.compile(mode=\"reduce-overhead\")) for launch-bound steps.",
     .source = "HTA: kernel breakdown and CUDA kernel launch statistics; " TUNING ": use CUDA graphs"},
    {.kind = "fp32_matmul_gpu", .evaluate = rule_fp32_matmul_gpu, .medium = 0.10, .high = 0.40,
     .apis = "torch.nn.functional.linear|torch.matmul|torch.mm|torch.bmm|torch.addmm|torch.baddbmm|torch.einsum|"
             "torch.Tensor.matmul|torch.Tensor.__matmul__|torch.conv1d|torch.conv2d|torch.conv3d|"
             "torch.nn.functional.scaled_dot_product_attention",
     .fix = "torch.set_float32_matmul_precision(\"high\") (TF32 on Ampere and newer), or run the forward under "
            "torch.autocast(\"cuda\", dtype=torch.bfloat16).",
     .source = TUNING ": use mixed precision and AMP; TorchTidy: FP32MatMulPattern"},
    /* ---- patterns of the calls ---- */
    {.kind = "zero_grad_fills", .evaluate = rule_zero_grad_fills, .medium = 0.01, .high = 0.10,
     .fix = "optimizer.zero_grad(set_to_none=True) (the default): no memset, and backward writes the gradients "
            "instead of adding to zeros.",
     .source = TUNING ": use parameter.grad = None; TorchTidy: GradNotSetToNonePattern"},
    {.kind = "conv_bias_before_batchnorm", .evaluate = rule_conv_bias_before_batchnorm, .medium = NEVER,
     .high = NEVER, .fix = "Build those convolutions with bias=False (nn.Conv2d(..., bias=False)).",
     .source = TUNING ": disable bias for convolutions directly followed by a batch norm; TorchTidy: "
               "Conv2dBiasFollowedByBatchNorm2dPattern"},
    {.kind = "recompilation", .evaluate = rule_recompilation, .medium = 0.05, .high = 0.20,
     .fix = "Keep the inputs' shapes and types stable, or compile for varying shapes: torch.compile(fn, dynamic=True) "
            "or torch._dynamo.mark_dynamic(x, 0); TORCH_LOGS=recompiles says why each recompilation happened.",
     .source = "torch.compile troubleshooting: recompilations"},
    {.kind = "straggler", .evaluate = NULL, /* after every sink settled: findings_add_stragglers */
     .medium = 0.05, .high = 0.20,
     .fix = "Look at what that rank does more: its data shard (uneven lengths, a slow sample), its host (tw-report "
            "--ranks lists the APIs), and balance it; tw-report --ranks --html shows the steps.",
     .source = "HTA: temporal breakdown and straggler analysis across ranks"},
    /* ---- last: a costly line that no rule above named ---- */
    /* (low always: with no cause known, a share alone is no mistake: a model's attention is a costly
     * line, and so is a loss under a loaded machine's OpenMP barriers) */
    {.kind = "costly_line", .evaluate = rule_costly_line, .medium = NEVER, .high = NEVER,
     .fix = "Read what that line runs (tw-report --by site, --tree for one step): if a step does not need it, move it "
            "out of the loop or run it every N steps.",
     .source = "the step's anatomy (no catalogue entry)"},
};

const rule_t *findings_rules(size_t *count)
{
    *count = sizeof rules / sizeof *rules;
    return rules;
}

const rule_t *findings_rule(const char *kind)
{
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
        if (strcmp(rules[i].kind, kind) == 0)
            return &rules[i];
    return NULL;
}


/* The busiest thread (most time in outermost calls' span): the one that ran the steps. */
static const thread_state_t *steps_thread(const findings_t *f)
{
    const thread_state_t *best = NULL;
    for (size_t i = 0; i < FIND_THREADS; i++) {
        const thread_state_t *t = f->threads[i];
        if (t != NULL && t->outer_rows > 0 &&
            (best == NULL || t->last_end - t->first_start > best->last_end - best->first_start))
            best = t;
    }
    return best;
}

/* The medians over the steps after the first of their gaps, waits and times; -1 under 3 steps. */
/* The median over v[0..n) of v[i] / spans[i] (spans > 0), with shares (n slots) to sort them in. */
static double median_share(const uint64_t *v, const uint64_t *spans, uint64_t *shares, size_t n)
{
    for (size_t i = 0; i < n; i++) /* (in millionths) */
        shares[i] = (uint64_t)(1e6 * (double)v[i] / (double)spans[i]);
    return findings_median_u64(shares, n) / 1e6;
}

static int typical_step_ns(const findings_t *f, settle_context_t *c)
{
    size_t n = 0, cap = f->steps != NULL ? f->max_step + 1 : 0;
    uint64_t *gaps = cap ? malloc(cap * sizeof *gaps) : NULL;
    uint64_t *loads = cap ? malloc(cap * sizeof *loads) : NULL;
    uint64_t *spans = cap ? malloc(cap * sizeof *spans) : NULL;
    uint64_t *shares = cap ? malloc(cap * sizeof *shares) : NULL;
    for (uint64_t s = 1; gaps != NULL && loads != NULL && spans != NULL && shares != NULL && s <= f->max_step; s++)
        if (f->steps[s].end > f->steps[s].start) {
            gaps[n] = f->steps[s].gap_ns;
            loads[n] = f->steps[s].loader_ns;
            /* (the gap before a step's first call lies before its span: counted in, which counts the
             * gaps inside twice, a share on the low side) */
            spans[n++] = f->steps[s].end - f->steps[s].start + f->steps[s].gap_ns;
        }
    int rc = n >= 3 ? 0 : -1;
    if (rc == 0) {
        /* each step's shares before the medians sort the arrays apart */
        c->median_gap_share = median_share(gaps, spans, shares, n);
        c->median_wait_share = median_share(loads, spans, shares, n);
        c->typical_gap = findings_median_u64(gaps, n);
        c->typical_wait = findings_median_u64(loads, n);
        c->typical_step = findings_median_u64(spans, n);
    }
    free(gaps);
    free(loads);
    free(spans);
    free(shares);
    return rc;
}

int findings_settle(report_sink_t *sink)
{
    findings_t *f = (findings_t *)sink;
    settle_context_t c = {.thread = steps_thread(f)};
    c.run_ns = c.thread != NULL ? c.thread->last_end - c.thread->first_start : 0;
    uint64_t steps = 0;
    for (uint64_t s = 0; f->steps != NULL && s <= f->max_step; s++)
        steps += f->steps[s].end > 0;
    /* the first step out of the rules' times and of the run's, from three steps on */
    if (steps >= 3 && f->steps[0].end > f->steps[0].start && f->steps[0].end - f->steps[0].start < c.run_ns) {
        f->skip_first = 1;
        c.run_ns -= f->steps[0].end - f->steps[0].start;
        steps--;
        f->leaf_calls[0] -= f->leaf_calls[1];
        f->small_calls[0] -= f->small_calls[1];
        f->small_ns[0] -= f->small_ns[1];
    }
    f->run_ms = findings_ms(c.run_ns);
    f->nsteps = steps;
    tally_t *tallies[] = {&f->loader_wait, &f->dataset_lines, &f->gaps, &f->small_ops,
                          &f->single_tensor_opt, &f->fills, &f->conv_bn, &f->compiles, &f->kept_bytes,
                          &f->eval_grad};
    for (size_t i = 0; i < sizeof tallies / sizeof *tallies; i++)
        findings_tally_settle(f, tallies[i]);
    c.per_step = steps > 0 ? (double)steps : 1;
    c.typical = typical_step_ns(f, &c) == 0 && c.typical_step > 0;
    findings_anatomy(f, &c);
    if (f->anatomy.valid) { /* the rules' typical step is the anatomy's: one step, one set of figures */
        c.typical = 1;
        c.typical_step = f->anatomy.step_ms * 1e6;
        c.typical_wait = f->anatomy.part_ms[PART_DATA] * 1e6;
        c.typical_gap = f->anatomy.part_ms[PART_PYTHON] * 1e6;
    }
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
        if (rules[i].evaluate != NULL)
            rules[i].evaluate(f, &rules[i], &c);
    findings_sort(f);
    f->oom |= f->series.oom;
    return f->oom ? TW_ENOMEM : 0;
}

void findings_add_stragglers(findings_t *f)
{
    if (f->ranks == NULL || f->ranks_done)
        return;
    f->ranks_done = 1;
    const ranks_result_t *r = report_ranks_result(f->ranks);
    for (size_t k = 0; r != NULL && k < r->nranks; k++) {
        const ranks_rank_t *rank = &r->by_rank[r->order[k]];
        if (!rank->straggler && !rank->likely)
            continue;
        /* its extra busy time a step, of the median rank's step: what every rank waits for */
        double share = r->step_time_ns > 0 ? rank->change_ns / r->step_time_ns : 0;
        finding_t *x = findings_add(f, findings_rule("straggler"), share);
        if (x == NULL)
            return;
        if (!rank->straggler) /* slowest more often than chance, too few steps for the test */
            x->severity = "low";
        char where[64];
        snprintf(where, sizeof where, "rank %" PRId64, rank->rank >= 0 ? rank->rank : rank->pid);
        if ((x->where[0] = malloc(strlen(where) + 1)) != NULL) {
            strcpy(x->where[0], where);
            x->nwhere = 1;
        }
        for (size_t a = 0; a < rank->napis && x->nwhere < FINDING_WHERE_MAX; a++)
            if ((x->where[x->nwhere] = malloc(strlen(rank->apis[a].api) + 1)) != NULL)
                strcpy(x->where[x->nwhere++], rank->apis[a].api);
        findings_evidence(x, "slowest_steps", (double)rank->slowest_steps);
        findings_evidence(x, "steps", (double)r->nsteps);
        findings_evidence(x, "extra_ms_per_step", rank->change_ns / 1e6);
        findings_evidence(x, "p_value", rank->p_value);
        if (!rank->straggler)
            findings_evidence(x, "more_steps", (double)rank->more_steps);
        snprintf(x->message, sizeof x->message,
                 "%s is %sslower than the other ranks: slowest in %zu of %zu steps, +%.2f ms busy a step (%.1f%% of a "
                 "step), which every rank waits for in its collectives%s%s.", where,
                 rank->straggler ? "" : "likely ", rank->slowest_steps, r->nsteps,
                 rank->change_ns / 1e6, 100 * share, rank->napis > 0 ? "; most of it in " : "",
                 rank->napis > 0 ? rank->apis[0].api : "");
    }
    findings_sort(f);
}
