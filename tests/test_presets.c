/* test_presets.c: timm's named configs and their parameter counts.
 * timm counts include the 1000-class head (head = D*1000 + 1000); vitrine's presets have
 * num_classes 0: vit_tiny 5,717,416 - 193,000 = 5,524,416; vit_small 22,050,664 - 385,000 =
 * 21,665,664; vit_base 86,567,656 - 769,000 = 85,798,656; vit_base_patch32 88,224,232 - 769,000 =
 * 87,455,232. The lightly wrapper adds its mask_token (D floats); with num_classes 1000 the timm
 * kind equals timm's own count. */
#include "test_util.h"

static size_t count(vt_kind kind, const char *preset, int num_classes, int mask_token, size_t *grads,
                    int *nparams) {
    vt_model_config c;
    vt_model_config_default(&c, kind);
    if (!CHECK_OK(vt_preset(preset, &c.enc), preset)) return 0;
    c.enc.num_classes = num_classes;
    c.enc.mask_token = mask_token;
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), preset)) return 0;
    size_t n = vt_param_total(m), sum = 0;
    for (int i = 0; i < vt_param_count(m); i++) sum += vt_param_numel(m, i);
    CHECK(sum == n, "%s: sum of numel %zu != vt_param_total %zu", preset, sum, n);
    if (grads) *grads = vt_grad_total(m);
    if (nparams) *nparams = vt_param_count(m);
    vt_model_free(m);
    return n;
}

int main(void) {
    const struct {
        const char *name;
        size_t timm_with_head;
        int D, patch, heads;
    } P[] = {
        { "vit_tiny_patch16_224", 5717416, 192, 16, 3 },
        { "vit_small_patch16_224", 22050664, 384, 16, 6 },
        { "vit_base_patch16_224", 86567656, 768, 16, 12 },
        { "vit_base_patch32_224", 88224232, 768, 32, 12 },
    };
    int np = (int)(sizeof P / sizeof P[0]);
    for (int i = 0; i < np; i++) {
        vt_vit_config c;
        CHECK_OK(vt_preset(P[i].name, &c), P[i].name);
        CHECK(c.embed_dim == P[i].D && c.patch_size == P[i].patch && c.num_heads == P[i].heads &&
                  c.depth == 12 && c.img_size == 224 && c.mlp_ratio == 4.0f && c.qkv_bias && c.class_token &&
                  c.num_classes == 0 && c.global_pool == VT_POOL_TOKEN,
              "%s: preset fields (D %d patch %d heads %d depth %d)", P[i].name, c.embed_dim, c.patch_size,
              c.num_heads, c.depth);
        CHECK(vt_preset_name(i) && !strcmp(vt_preset_name(i), P[i].name), "vt_preset_name(%d) = %s", i,
              vt_preset_name(i) ? vt_preset_name(i) : "NULL");
        size_t head = (size_t)P[i].D * 1000 + 1000, want = P[i].timm_with_head - head, g = 0;
        int nt = 0, nl = 0;
        size_t timm0 = count(VT_KIND_TIMM, P[i].name, 0, 0, &g, &nt);
        CHECK(timm0 == want, "%s timm kind, no head: %zu params, want %zu", P[i].name, timm0, want);
        CHECK(g == timm0, "%s timm kind: %zu gradient floats, want all %zu", P[i].name, g, timm0);
        CHECK(nt == 4 + 12 * 12 + 2, "%s timm kind: %d tensors, want %d", P[i].name, nt, 4 + 12 * 12 + 2);
        size_t timm1000 = count(VT_KIND_TIMM, P[i].name, 1000, 0, NULL, NULL);
        CHECK(timm1000 == P[i].timm_with_head, "%s timm kind with 1000 classes: %zu, timm says %zu",
              P[i].name, timm1000, P[i].timm_with_head);
        size_t lt = count(VT_KIND_LIGHTLY, P[i].name, 0, 1, &g, &nl);
        CHECK(lt == want + (size_t)P[i].D, "%s lightly kind: %zu params, want %zu + mask_token %d", P[i].name,
              lt, want, P[i].D);
        size_t G = 224 / (size_t)P[i].patch, pos = (G * G + 1) * (size_t)P[i].D;
        CHECK(g == lt - pos, "%s lightly kind: %zu gradient floats, want all but the frozen pos_embed (%zu)",
              P[i].name, g, lt - pos);
        CHECK(nl == nt + 1, "%s lightly kind: %d tensors, want %d", P[i].name, nl, nt + 1);
    }
    /* the families (timm 1.0.29.dev0's create_model(name, num_classes=0): its parameter count and
     * state_dict size; the first and last keys) */
    const struct {
        const char *name;
        size_t timm;
        int tensors;
        const char *first, *last;
    } F[] = {
        { "vit_base_patch16_clip_224", 85799424, 151, "cls_token", "norm.bias" },
        { "vit_base_patch32_clip_224", 87456000, 151, "cls_token", "norm.bias" },
        { "vit_base_patch16_clip_quickgelu_224", 85799424, 151, "cls_token", "norm.bias" },
        { "vit_base_patch32_clip_quickgelu_224", 87456000, 151, "cls_token", "norm.bias" },
        { "vit_base_patch16_siglip_224", 92884224, 162, "pos_embed", "attn_pool.mlp.fc2.bias" },
        { "deit_tiny_patch16_224", 5524416, 150, "cls_token", "norm.bias" },
        { "deit_small_patch16_224", 21665664, 150, "cls_token", "norm.bias" },
        { "deit_base_patch16_224", 85798656, 150, "cls_token", "norm.bias" },
        { "deit_tiny_distilled_patch16_224", 5524800, 151, "cls_token", "norm.bias" },
        { "deit_small_distilled_patch16_224", 21666432, 151, "cls_token", "norm.bias" },
        { "deit_base_distilled_patch16_224", 85800192, 151, "cls_token", "norm.bias" },
        { "vit_small_patch14_reg4_dinov2", 22057344, 175, "cls_token", "norm.bias" },
        { "vit_base_patch14_reg4_dinov2", 86582016, 175, "cls_token", "norm.bias" },
    };
    int nf = (int)(sizeof F / sizeof F[0]);
    for (int i = 0; i < nf; i++) {
        int nt = 0;
        size_t n = count(VT_KIND_TIMM, F[i].name, 0, 0, NULL, &nt);
        CHECK(n == F[i].timm && nt == F[i].tensors, "%s: %zu params in %d tensors, timm has %zu in %d",
              F[i].name, n, nt, F[i].timm, F[i].tensors);
        CHECK(vt_preset_name(np + i) && !strcmp(vt_preset_name(np + i), F[i].name), "vt_preset_name(%d) = %s",
              np + i, vt_preset_name(np + i) ? vt_preset_name(np + i) : "NULL");
        vt_model_config mc;
        vt_model_config_default(&mc, VT_KIND_TIMM);
        vt_model *m = NULL;
        if (CHECK_OK(vt_preset(F[i].name, &mc.enc), F[i].name) &&
            CHECK_OK(vt_model_create(&mc, &m), F[i].name))
            CHECK(!strcmp(vt_param_name(m, 0), F[i].first) &&
                      !strcmp(vt_param_name(m, vt_param_count(m) - 1), F[i].last),
                  "%s: first / last tensors %s / %s, timm's %s / %s", F[i].name, vt_param_name(m, 0),
                  vt_param_name(m, vt_param_count(m) - 1), F[i].first, F[i].last);
        vt_model_free(m);
    }
    CHECK(vt_preset_name(np + nf) == NULL && vt_preset_name(-1) == NULL,
          "vt_preset_name past the end is not NULL");
    /* the state_dict order of vit_tiny (reference-models.md 1.3) */
    vt_model_config c;
    vt_model_config_default(&c, VT_KIND_TIMM);
    vt_preset("vit_tiny_patch16_224", &c.enc);
    c.enc.num_classes = 1000;
    vt_model *m = NULL;
    if (CHECK_OK(vt_model_create(&c, &m), "vit_tiny")) {
        const char *first[] = { "cls_token",
                                "pos_embed",
                                "patch_embed.proj.weight",
                                "patch_embed.proj.bias",
                                "blocks.0.norm1.weight",
                                "blocks.0.norm1.bias",
                                "blocks.0.attn.qkv.weight",
                                "blocks.0.attn.qkv.bias",
                                "blocks.0.attn.proj.weight",
                                "blocks.0.attn.proj.bias",
                                "blocks.0.norm2.weight",
                                "blocks.0.norm2.bias",
                                "blocks.0.mlp.fc1.weight",
                                "blocks.0.mlp.fc1.bias",
                                "blocks.0.mlp.fc2.weight",
                                "blocks.0.mlp.fc2.bias" };
        for (int i = 0; i < 16; i++)
            CHECK(!strcmp(vt_param_name(m, i), first[i]), "vit_tiny param %d is %s, want %s", i,
                  vt_param_name(m, i), first[i]);
        int n = vt_param_count(m);
        CHECK(!strcmp(vt_param_name(m, n - 4), "norm.weight") &&
                  !strcmp(vt_param_name(m, n - 1), "head.bias"),
              "vit_tiny: last tensors %s ... %s", vt_param_name(m, n - 4), vt_param_name(m, n - 1));
        int q = vt_param_find(m, "blocks.11.attn.qkv.weight");
        CHECK(q >= 0 && vt_param_ndim(m, q) == 2 && vt_param_shape(m, q)[0] == 576 &&
                  vt_param_shape(m, q)[1] == 192,
              "blocks.11.attn.qkv.weight shape");
        int pe = vt_param_find(m, "patch_embed.proj.weight");
        CHECK(pe >= 0 && vt_param_ndim(m, pe) == 4 && vt_param_shape(m, pe)[1] == 3 &&
                  vt_param_shape(m, pe)[3] == 16,
              "patch_embed.proj.weight shape");
        vt_model_free(m);
    }
    return tu_finish();
}
