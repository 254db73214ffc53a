"""Two MediaPipe models chained on one GPU device, with the compositing between them on the GPU too.

Each frame: selfie_segmentation computes a person mask; a small compute shader (written here, on the device
gpuengine uses) replaces the background with gray and halves the image to 128x128; face_detection_short_range
reads that image straight from the GPU buffer. Only the face detector's outputs come back to the host: one
readback per frame instead of three. The same pipeline through the host (read the mask, composite in numpy,
upload) runs too, to check that both give the same detections and to compare frames per second.

The GPU path runs on either of gpuengine's APIs: `--api interpreter` (Interpreter.input_buffer / output_buffer /
set_input_buffer) or `--api compiled` (LiteRT 2.x's CompiledModel with TensorBuffers, whose `.buffer` is the
wgpu buffer the compositing shader reads and writes).

Run: .venv/bin/python examples/segment_then_detect.py [--frames 50] [--api compiled] (the models are fetched on
first use).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import wgpu
from gpuengine.tools import fetch
from tqdm import tqdm

import gpuengine
from gpuengine import CompiledModel, Interpreter

COMPOSITE = """
@group(0) @binding(0) var<storage, read> frame: array<f32>;       // 1x256x256x3, BHWC
@group(0) @binding(1) var<storage, read> mask: array<f32>;        // 1x256x256x1
@group(0) @binding(2) var<storage, read_write> out: array<f32>;   // 1x128x128x3
@compute @workgroup_size(8, 8, 1)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x >= 128u || g.y >= 128u) { return; }
  var rgb = vec3<f32>(0.0);
  for (var dy = 0u; dy < 2u; dy++) {
    for (var dx = 0u; dx < 2u; dx++) {
      let p = (g.y * 2u + dy) * 256u + g.x * 2u + dx;
      let m = clamp(mask[p], 0.0, 1.0);
      let c = vec3<f32>(frame[p * 3u], frame[p * 3u + 1u], frame[p * 3u + 2u]);
      rgb += mix(vec3<f32>(0.5), c, m) * 0.25;
    }
  }
  let q = (g.y * 128u + g.x) * 3u;
  out[q] = rgb.x;
  out[q + 1u] = rgb.y;
  out[q + 2u] = rgb.z;
}
"""


def composite_numpy(frame: np.ndarray, mask: np.ndarray) -> np.ndarray:
    mixed = 0.5 + (frame - 0.5) * np.clip(mask, 0.0, 1.0)
    return mixed.reshape(1, 128, 2, 128, 2, 3).mean(axis=(2, 4)).astype(np.float32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--api", choices=("interpreter", "compiled"), default="interpreter",
                        help="gpuengine API of the GPU path: Interpreter, or LiteRT 2.x's CompiledModel")
    args = parser.parse_args()
    print("compiling selfie_segmentation and face_detection_short_range, twice (GPU-chained and through the host)",
          file=sys.stderr, flush=True)
    device = gpuengine.get_device()
    segment_path = str(fetch.model_path("selfie_segmentation"))
    detect_path = str(fetch.model_path("face_detection_short_range"))
    rng = np.random.default_rng(0)
    frames = [rng.uniform(0.0, 1.0, (1, 256, 256, 3)).astype(np.float32) for _ in range(8)]
    pipeline = device.create_compute_pipeline(
        layout="auto", compute={"module": device.create_shader_module(code=COMPOSITE), "entry_point": "main"})

    def composite(bind_group: object) -> None:
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, bind_group)
        compute.dispatch_workgroups(16, 16, 1)
        compute.end()
        device.queue.submit([encoder.finish()])

    def bind(frame_buf: object, mask_buf: object, image_buf: object) -> object:
        return device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
            {"binding": k, "resource": {"buffer": b}} for k, b in enumerate((frame_buf, mask_buf, image_buf))])

    if args.api == "interpreter":
        # GPU path: the frame buffer the segmenter reads, its mask, and the image the detector reads.
        segment = Interpreter(model_path=segment_path, device=device)
        detect = Interpreter(model_path=detect_path, device=device)
        segment.allocate_tensors()
        detect.allocate_tensors()
        frame_buf = segment.input_buffer(0).buffer
        image_buf = device.create_buffer(size=128 * 128 * 3 * 4, usage=wgpu.BufferUsage.STORAGE)
        detect.set_input_buffer(0, image_buf)
        bind_group = bind(frame_buf, segment.output_buffer(0).buffer, image_buf)
        adapter = segment.compiled.gpu.name

        def gpu_frame(frame: np.ndarray) -> list[np.ndarray]:
            device.queue.write_buffer(frame_buf, 0, frame)
            segment.invoke_async(read_outputs=False)
            composite(bind_group)
            results = detect.invoke_async().result()
            return [results[d["index"]] for d in detect.get_output_details()]
    else:
        # The same with CompiledModel: TensorBuffers are GPU buffers; the detector's input buffer is written by the
        # compositing shader and read by the detector's kernels where it is; reading both detector outputs maps
        # one staging buffer.
        segment = CompiledModel.from_file(segment_path, device=device)
        detect = CompiledModel.from_file(detect_path, device=device)
        seg_in, seg_out = segment.create_input_buffers(0), segment.create_output_buffers(0)
        det_in, det_out = detect.create_input_buffers(0), detect.create_output_buffers(0)
        bind_group = bind(seg_in[0].buffer, seg_out[0].buffer, det_in[0].buffer)
        sizes = [detect.get_output_buffer_requirements(k)["buffer_size"] // 4 for k in range(len(det_out))]
        adapter = device.adapter.summary

        def gpu_frame(frame: np.ndarray) -> list[np.ndarray]:
            seg_in[0].write(frame)
            segment.run_by_index(0, seg_in, seg_out)
            composite(bind_group)
            detect.run_by_index(0, det_in, det_out)
            return [buffer.read(n, np.float32) for buffer, n in zip(det_out, sizes)]

    # Host path: read the mask back, composite in numpy, upload the image.
    host_segment = Interpreter(model_path=segment_path, device=device)
    host_detect = Interpreter(model_path=detect_path, device=device)
    host_segment.allocate_tensors()
    host_detect.allocate_tensors()

    def host_frame(frame: np.ndarray) -> list[np.ndarray]:
        host_segment.set_tensor(host_segment.get_input_details()[0]["index"], frame)
        host_segment.invoke()
        mask = host_segment.get_tensor(host_segment.get_output_details()[0]["index"])
        host_detect.set_tensor(host_detect.get_input_details()[0]["index"], composite_numpy(frame, mask))
        host_detect.invoke()
        return [host_detect.get_tensor(d["index"]) for d in host_detect.get_output_details()]

    worst = 0.0
    for frame in frames[:3]:
        gpu, host = gpu_frame(frame), host_frame(frame)
        worst = max(worst, *(float(np.max(np.abs(g.reshape(-1) - h.reshape(-1))) / max(1.0, float(np.max(np.abs(h)))))
                             for g, h in zip(gpu, host)))
    print(f"adapter: {adapter}, GPU path through gpuengine's {args.api} API", flush=True)
    rates = {}
    for name, step in (("GPU-chained", gpu_frame), ("through the host", host_frame)):
        start = time.perf_counter()
        for k in tqdm(range(args.frames), desc=name, unit="frame", leave=False, file=sys.stderr):
            step(frames[k % len(frames)])
        rates[name] = args.frames / (time.perf_counter() - start)
    for name, fps in rates.items():
        print(f"{name:>17}: {fps:8.1f} frames/s")
    print(f"detections, GPU-chained vs through the host: max relative difference {worst:.2g}")
    return 0 if worst <= 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
