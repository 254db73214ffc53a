// The online-softmax step of key n (its score dot_qk): the running maximum's correction `corr`, the key's weight
// `p` and the running sum; the caller rescales `acc` by corr, adds p * value and moves mx to top.
let score = dot_qk * scale + mask_at(i0, i1, m, n);
  let top = max(mx, score);
  let corr = exp(mx - top);
  let p = exp(score - top);
  total = total * corr + p;
