-- Issue 47. Self-hosted cost of a candidate: GPUs (or instances) it runs on, their kind, and the
-- price per GPU-hour (per instance-hour) in USD; with the capacity measured, cost per answer.
ALTER TABLE candidates ADD COLUMN gpu_count INTEGER;
ALTER TABLE candidates ADD COLUMN gpu_kind TEXT;
ALTER TABLE candidates ADD COLUMN gpu_hour_price DOUBLE PRECISION;
