// The end of every `store(v, ...)` function: `oi` located, the epilogue applied to v and the vec4 written to `dst`.
  var value = v;
  ${EPILOGUE}
  dst[oi] = D4(value);
}
