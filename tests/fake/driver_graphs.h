/*
 * The fake driver's graphs, included by cuda.c: stream capture, as the
 * runtime's fake has it, and graphs built node by node.
 */
/* Stream capture, as the runtime's fake has it: each graph and executable
 * graph a fresh address. */
static char graph_handles[64];
static int graphs_made;
CUresult cuStreamBeginCapture_v2(CUstream stream, int mode) { trace("cuStreamBeginCapture_v2 stream=%p", stream); return OK; }
CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, int mode) { trace("cuStreamBeginCapture_v2_ptsz stream=%p", stream); return OK; }
CUresult cuStreamEndCapture(CUstream stream, void **graph) { *graph = &graph_handles[graphs_made++ % 64]; trace("cuStreamEndCapture graph=%p", *graph); return OK; }
CUresult cuStreamEndCapture_ptsz(CUstream stream, void **graph) { *graph = &graph_handles[graphs_made++ % 64]; return OK; }
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) { *exec = &graph_handles[graphs_made++ % 64]; trace("cuGraphInstantiateWithFlags exec=%p", *exec); return OK; }
CUresult cuGraphInstantiateWithParams(void **exec, void *graph, void *params) { *exec = &graph_handles[graphs_made++ % 64]; trace("cuGraphInstantiateWithParams exec=%p", *exec); return OK; }
CUresult cuGraphInstantiateWithParams_ptsz(void **exec, void *graph, void *params) { *exec = &graph_handles[graphs_made++ % 64]; return OK; }
CUresult cuGraphExecDestroy(void *exec) { trace("cuGraphExecDestroy exec=%p", exec); return OK; }

/* Graphs built node by node: kernel nodes keep copies of their arguments
 * (sized by the function's layout), as the driver does, and child graphs. */
#define MAX_NODES 8
#define MAX_ARGS 8
struct fake_graph;
struct fake_node {
    int type; /* 0: kernel, 4: child graph */
    void *func;
    unsigned char values[MAX_ARGS][64];
    void *args[MAX_ARGS];
    struct fake_graph *child;
};
struct fake_graph { int count; struct fake_node nodes[MAX_NODES]; };
static struct fake_graph built_graphs[8];
static int built_count;
struct kernel_node_params { void *func; unsigned grid[3], block[3], shared; void **params, **extra; void *kern, *ctx; };
static struct fake_graph *built(void *graph) {
    for (int i = 0; i < built_count; i++)
        if (graph == &built_graphs[i]) return &built_graphs[i];
    return NULL;
}
static struct fake_node *add_node(void **node, void *graph, int type) {
    struct fake_graph *g = built(graph);
    if (!g || g->count == MAX_NODES) return NULL;
    struct fake_node *n = &g->nodes[g->count++];
    memset(n, 0, sizeof *n);
    n->type = type;
    *node = n;
    return n;
}
static struct fake_node *node_of(void *node) {
    for (int i = 0; i < built_count; i++)
        for (int j = 0; j < built_graphs[i].count; j++)
            if (node == &built_graphs[i].nodes[j]) return &built_graphs[i].nodes[j];
    return NULL;
}
CUresult cuGraphCreate(void **graph, unsigned flags) {
    if (built_count == 8) return INVALID_VALUE;
    built_graphs[built_count].count = 0;
    *graph = &built_graphs[built_count++];
    return OK;
}
CUresult cuGraphAddKernelNode_v2(void **node, void *graph, void **deps, size_t ndeps, const struct kernel_node_params *p) {
    struct fake_node *n = add_node(node, graph, 0);
    if (!n) return INVALID_VALUE;
    n->func = p->func;
    for (size_t i = 0, offset, size; i < MAX_ARGS && param_info(p->func, i, &offset, &size) == OK; i++) {
        if (size > sizeof n->values[i]) return INVALID_VALUE;
        memcpy(n->values[i], p->params[i], size);
        n->args[i] = n->values[i];
    }
    return OK;
}
CUresult cuGraphAddChildGraphNode(void **node, void *graph, void **deps, size_t ndeps, void *child) {
    struct fake_node *n = add_node(node, graph, 4);
    if (!n || !built(child)) return INVALID_VALUE;
    n->child = built(child);
    return OK;
}
CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *count) {
    struct fake_graph *g = built(graph);
    if (!g) return INVALID_VALUE;
    if (nodes)
        for (int i = 0; i < g->count && (size_t)i < *count; i++) nodes[i] = &g->nodes[i];
    if (!nodes || *count > (size_t)g->count) *count = g->count;
    return OK;
}
CUresult cuGraphNodeGetType(void *node, int *type) {
    struct fake_node *n = node_of(node);
    if (!n) return INVALID_VALUE;
    *type = n->type;
    return OK;
}
CUresult cuGraphKernelNodeGetParams_v2(void *node, struct kernel_node_params *p) {
    struct fake_node *n = node_of(node);
    if (!n || n->type != 0) return INVALID_VALUE;
    memset(p, 0, sizeof *p);
    p->func = n->func;
    p->params = n->args;
    return OK;
}
CUresult cuGraphChildGraphNodeGetGraph(void *node, void **graph) {
    struct fake_node *n = node_of(node);
    if (!n || n->type != 4) return INVALID_VALUE;
    *graph = n->child;
    return OK;
}
CUresult cuGraphDestroy(void *graph) { trace("cuGraphDestroy graph=%p", graph); return OK; }
