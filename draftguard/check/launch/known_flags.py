"""The options of each engine version's launcher that take no value (switches: ``store_true``,
``--x/--no-x``), read from the engines' own parsers: vLLM 0.32.0's ``vllm serve`` (``ServeSubcommand``
on a ``FlexibleArgumentParser``) and SGLang 0.5.23's ``ServerArgs.add_cli_args``. Without them a
switch followed by a word cannot be told from an option and its value. A test marked ``vllm`` holds
these equal to the parsers.

In: nothing.
Out: ``NO_VALUE``: engine -> option names without their leading ``--``. Pure data.
"""

VLLM_0_32 = frozenset("""
aggregate-engine-logging allow-credentials allow-deprecated-quantization async-scheduling
cohere-is-reasoning-model cudagraph-metrics data-parallel-external-lb data-parallel-hybrid-lb
data-parallel-multi-port-external-lb dcp-q-replicate disable-cascade-attn disable-chunked-mm-input
disable-custom-all-reduce disable-fastapi-docs disable-hybrid-kv-cache-manager disable-log-stats
disable-nccl-for-dp-synchronization disable-sliding-window disable-uvicorn-access-log enable-auto-tool-choice
enable-batch-sharded-sampling enable-chunked-prefill enable-cumem-allocator enable-dbo enable-elastic-ep
enable-ep-weight-filter enable-eplb enable-expert-parallel enable-fault-tolerance
enable-flash-late-interaction enable-flashinfer-autotune enable-force-include-usage enable-hc-sp
enable-layerwise-nvtx-tracing enable-log-deltas enable-log-outputs enable-log-requests
enable-logging-iteration-details enable-lora enable-mamba-cache-stochastic-rounding
enable-mamba-shared-prefix-checkpoint enable-mfu-metrics enable-mixed-moe-lora-format enable-mm-embeds
enable-moe-shared-loras enable-nccl-comm-suspend enable-offline-docs enable-per-request-metrics
enable-prefix-caching enable-prompt-embeds enable-prompt-tokens-details enable-request-id-headers
enable-return-routed-experts enable-scale-out enable-server-load-tracking enable-shm-tensor-arena
enable-sleep-mode enable-ssl-refresh enable-tokenizer-info-endpoint enable-tower-connector-lora
enable-trace-replay enforce-eager exclude-tools-when-tool-choice-none fail-on-environ-validation
fully-sharded-loras grpc headless help interleave-mm-strings jit-monitor-verbose kv-cache-metrics
kv-sharing-fast-prefill language-model-only log-error-stack long-prefill-token-threshold-adaptive
mm-device-do-normalize mm-encoder-only no-allow-credentials no-allow-deprecated-quantization
no-async-scheduling no-cohere-is-reasoning-model no-cudagraph-metrics no-data-parallel-external-lb
no-data-parallel-hybrid-lb no-dcp-q-replicate no-disable-cascade-attn no-disable-chunked-mm-input
no-disable-custom-all-reduce no-disable-fastapi-docs no-disable-hybrid-kv-cache-manager
no-disable-nccl-for-dp-synchronization no-disable-sliding-window no-disable-uvicorn-access-log
no-enable-auto-tool-choice no-enable-batch-sharded-sampling no-enable-chunked-prefill
no-enable-cumem-allocator no-enable-dbo no-enable-elastic-ep no-enable-ep-weight-filter no-enable-eplb
no-enable-expert-parallel no-enable-fault-tolerance no-enable-flash-late-interaction
no-enable-flashinfer-autotune no-enable-force-include-usage no-enable-hc-sp no-enable-layerwise-nvtx-tracing
no-enable-log-deltas no-enable-log-outputs no-enable-log-requests no-enable-logging-iteration-details
no-enable-lora no-enable-mamba-cache-stochastic-rounding no-enable-mamba-shared-prefix-checkpoint
no-enable-mfu-metrics no-enable-mixed-moe-lora-format no-enable-mm-embeds no-enable-moe-shared-loras
no-enable-nccl-comm-suspend no-enable-offline-docs no-enable-per-request-metrics no-enable-prefix-caching
no-enable-prompt-embeds no-enable-prompt-tokens-details no-enable-request-id-headers
no-enable-return-routed-experts no-enable-scale-out no-enable-server-load-tracking no-enable-shm-tensor-arena
no-enable-sleep-mode no-enable-ssl-refresh no-enable-tokenizer-info-endpoint no-enable-tower-connector-lora
no-enable-trace-replay no-enforce-eager no-exclude-tools-when-tool-choice-none no-fail-on-environ-validation
no-fully-sharded-loras no-interleave-mm-strings no-jit-monitor-verbose no-kv-cache-metrics
no-kv-sharing-fast-prefill no-language-model-only no-log-error-stack no-long-prefill-token-threshold-adaptive
no-mm-device-do-normalize no-mm-encoder-only no-numa-bind no-ray-workers-use-nsight no-return-sampling-mask
no-return-tokens-as-token-ids no-scheduler-reserve-full-isl no-skip-mm-profiling no-skip-tokenizer-init
no-sleep-mode-offload-cudagraph no-specialize-active-lora no-swa-bounded-replay no-tokens-only
no-trust-remote-code no-trust-request-chat-template no-trust-request-mm-kwargs no-use-fp64-gumbel
no-use-replayssm no-use-tqdm-on-load numa-bind ray-workers-use-nsight return-sampling-mask
return-tokens-as-token-ids scheduler-reserve-full-isl skip-mm-profiling skip-tokenizer-init
sleep-mode-offload-cudagraph specialize-active-lora swa-bounded-replay tokens-only trust-remote-code
trust-request-chat-template trust-request-mm-kwargs use-fp64-gumbel use-replayssm use-tqdm-on-load
""".split())

SGLANG_0_5_23 = frozenset("""
abort-on-priority-when-disabled allow-auto-truncate checkpoint-engine-wait-weights-before-ready
constrained-json-disable-any-whitespace dcp-replicate-q-proj debug-cuda-graph delete-ckpt-after-loading
disable-aiter-allreduce-fusion-in-decode disable-aiter-allreduce-fusion-in-prefill disable-attn-tp-gather
disable-chunked-prefix-cache disable-cuda-graph disable-cuda-graph-padding disable-custom-all-reduce
disable-decode-cuda-graph disable-fast-image-processor disable-flashinfer-autotune
disable-flashinfer-cutlass-moe-fp4-allgather disable-hybrid-swa-memory disable-outlines-disk-cache
disable-overlap-schedule disable-prefill-cuda-graph disable-priority-preemption disable-radix-cache
disable-shared-experts-fusion disable-tokenizer-batch-decode disaggregation-decode-enable-offload-kvcache
disaggregation-decode-enable-radix-cache disaggregation-enable-kv-checksum dllm-fdfo
enable-adaptive-dispatch-to-encoder enable-aiter-allreduce-fusion enable-amd-monokernel
enable-attn-tp-input-scattered enable-broadcast-mm-inputs-process enable-cache-report enable-cp-decode-attn-tp
enable-cudagraph-gc enable-custom-logit-processor enable-decoder-swa-bounded-replay
enable-deepseek-v4-fp4-indexer enable-dense-mlp-attn-tp enable-deterministic-inference enable-dp-attention
enable-dp-attention-local-control-broadcast enable-dp-lm-head enable-draft-weights-cpu-backup
enable-dsa-cache-layer-split enable-dsa-fused-indexer enable-dynamic-batch-tokenizer enable-dynamic-chunking
enable-elastic-expert-backup enable-encoder-swa-bounded-replay enable-eplb enable-flashinfer-allreduce-fusion
enable-flexkv enable-forward-pass-metrics enable-fp32-lm-head enable-fused-moe-sum-all-reduce
enable-fused-qk-norm-rope enable-hicache enable-hierarchical-cache enable-hisparse
enable-http-worker-reuseport enable-http2 enable-int8-mamba-checkpoint enable-kv-cache-sharding
enable-layernorm-sp enable-layerwise-nvtx-marker enable-lean-attention enable-linear-replayssm
enable-linear-replayssm-spec enable-linker-mla-dedup enable-lmcache enable-lora enable-lora-overlap-loading
enable-mamba-cache-stochastic-rounding enable-megamoe-for-layernorm-sp enable-memory-saver enable-metrics
enable-metrics-for-all-schedulers enable-mfu-metrics enable-mis enable-mixed-chunk enable-mm-global-cache
enable-mscclpp enable-multi-layer-eagle enable-multimodal enable-nccl-nvls enable-nvidia-megakernel
enable-p2p-check enable-page-major-kv-layout enable-paged-experts enable-pd-role-switch enable-pdmux
enable-precise-embedding-interpolation enable-prefill-cp enable-prefill-delayer enable-prefix-mm-cache
enable-priority-scheduling enable-profile-cuda-graph enable-quant-communications
enable-request-time-stats-logging enable-response-store enable-return-aux-hidden-states
enable-return-hidden-states enable-return-indexer-topk enable-return-routed-experts enable-scattered-sconv
enable-session-radix-cache enable-shared-experts-attn-tp enable-single-batch-overlap enable-ssl-refresh
enable-streaming-session enable-strict-thinking enable-symm-mem enable-tf32-matmul
enable-tokenizer-batch-encode enable-torch-compile enable-torch-compile-debug-mode enable-torch-symm-mem
enable-tp-lm-head-all-to-all enable-trace enable-two-batch-overlap enable-unified-cache-external-linker
enable-unified-memory enable-w4a4-mxfp4-megamoe enable-waterfill enable-watermark enable-weights-cpu-backup
encoder-only enforce-disable-flashinfer-allreduce-fusion enforce-shared-experts-fusion
experts-shared-outer-loras export-metrics-to-file flashinfer-mla-disable-ragged grpc-mode help
incremental-streaming-output is-embedding language-model-only language-only log-requests lora-strict-loading
lora-use-virtual-experts mlx-enable-sampling mm-enable-dp-encoder no-dcp-replicate-q-proj no-dllm-fdfo
no-enable-decoder-swa-bounded-replay no-enable-dsa-fused-indexer no-enable-fused-qk-norm-rope
no-enable-tf32-matmul no-enable-tp-lm-head-all-to-all no-experts-shared-outer-loras no-lora-strict-loading
no-mm-enable-dp-encoder no-ple-offload-embedding no-speculative-enable-w4a4-mxfp4-megamoe
ple-offload-embedding pre-warm-nccl prefill-only-disable-kv-cache quantize-and-serve
remote-instance-weight-loader-start-seed-via-transfer-engine return-input-ids return-output-ids
schedule-low-priority-values-first show-time-cost skip-server-warmup skip-tokenizer-init sleep-on-idle
smg-grpc-mode speculative-adaptive speculative-dspark-align-verify-tokens-to-graph-tier
speculative-enable-w4a4-mxfp4-megamoe speculative-use-block-verification speculative-use-rejection-sampling
stream-response-default-include-usage strip-thinking-cache triton-attention-reduce-in-fp32
trust-mm-content-hashes trust-remote-code trust-request-chat-template use-ray weight-loader-disable-mmap
weight-loader-drop-cache-after-load weight-loader-prefetch-checkpoints
""".split())

NO_VALUE = {"vllm": VLLM_0_32, "sglang": SGLANG_0_5_23}
