#!/bin/sh
# The healthy pair: the fixtures' DFlash drafter on its target, within the trained length.
vllm serve ../../fixtures/vllm-models/target --max-model-len 128 \
  --speculative-config '{"method": "dflash", "model": "../../fixtures/vllm-models/drafter", "num_speculative_tokens": 3}'
