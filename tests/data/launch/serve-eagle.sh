#!/bin/sh
# An EAGLE-3 head (SpecForge's, for Llama 3.1 8B) launched with "method": "eagle".
SPEC='{"method": "eagle", "model": "../real-drafters/specforge-llama3-8b-eagle3", "num_speculative_tokens": 3}'
vllm serve ../real-drafters/targets/llama-3.1-8b \
    --max-model-len 8192 \
    --speculative-config "$SPEC"
