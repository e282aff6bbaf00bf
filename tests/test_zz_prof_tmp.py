import cProfile, pstats, torch
def test_prof():
    from mathcircuits.models import load_hf_model
    from mathcircuits.evaluation import generate_greedy
    m,t=load_hf_model('tiny-llama')
    pr=cProfile.Profile(); pr.enable()
    generate_greedy(m,t,['Q: 1\nA:'],max_new_tokens=6)
    pr.disable(); pstats.Stats(pr).sort_stats('cumtime').print_stats(25)
